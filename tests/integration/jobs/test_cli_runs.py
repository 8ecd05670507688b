"""The ``tideway worker`` and ``tideway runs`` commands, run as a user would (subprocesses)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import nats
from nats.aio.msg import Msg

from stages.jobs.errors import ErrorSource, describe
from streams.config import Settings
from streams.jobs import queue
from streams.names import Names
from tests.conftest import REPO_ROOT
from tests.integration.jobs.conftest import Owner, start_run
from tests.integration.jobs.helpers import drive, wait_run

CLI = [sys.executable, "-c", "from streams.cli.main import main; main()"]


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "TIDEWAY_POSTGRES_DSN": settings.postgres(),
        "TIDEWAY_NATS_URL": settings.nats(),
        "TIDEWAY_NAMESPACE": settings.namespace,
        "TIDEWAY_WORKER__POLL_INTERVAL_S": "0.2",
        "TIDEWAY_WORKER__HEARTBEAT_S": "0.2",
        "COLUMNS": "200",
    }


async def tideway(settings: Settings, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, cwd=REPO_ROOT, env=_env(settings),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_runs_show_list_retry_cancel(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    broken = describe("NO_START_LINE", "no crossing", retriable=False, source=ErrorSource.STAGE)
    await drive(conn, {"detect_laps": broken})

    code, out, err = await tideway(settings, "runs", "show", str(run_id))
    assert code == 0, err
    assert "partial" in out and "detect_laps" in out and "LAP_DETECTION_FAILED" in out
    assert "attempt 1 failed NO_START_LINE" in out
    assert "after detect_laps, (detect_segments)" in out  # compute_metrics: hard and soft deps

    code, out, err = await tideway(settings, "runs", "show", str(run_id), "--json")
    assert code == 0, err
    shown: dict[str, Any] = json.loads(out)
    jobs = {j["name"]: j for j in shown["jobs"]}
    assert shown["jobs"][0]["name"] == "artifact_validate"
    assert jobs["detect_laps"]["state"] == "failed"
    assert jobs["detect_laps"]["attempts"][0]["error_code"] == "NO_START_LINE"
    assert jobs["compute_metrics"]["skip_reason"] == "LAP_DETECTION_FAILED"
    assert {"on": "detect_segments", "hard": False} in jobs["compute_metrics"]["deps"]
    assert shown["feature_reasons"]["laps"] == "LAP_DETECTION_FAILED"

    code, out, err = await tideway(settings, "runs", "list", "--json", "--tenant", "acme")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)] == [str(run_id)]

    code, out, err = await tideway(settings, "runs", "retry", str(run_id))
    assert code == 0, err
    retry_id = await conn.fetchval("SELECT id FROM processing_runs WHERE retry_of = $1", run_id)
    assert str(retry_id) in out

    code, out, err = await tideway(settings, "runs", "cancel", str(retry_id))
    assert code == 0, err
    assert (
        await conn.fetchval("SELECT status FROM processing_runs WHERE id = $1", retry_id)
        == "cancelled"
    )

    code, out, err = await tideway(settings, "runs", "show", "not-a-uuid")
    assert code != 0 and "not a run id" in err


async def test_worker_command_runs_jobs_and_stops_on_sigterm(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "worker", "--concurrency", "4", "--executors", "placeholder",
        cwd=REPO_ROOT, env=_env(settings),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        run_id = await start_run(conn, owner, channel=queue.jobs_channel(settings))
        assert await wait_run(conn, run_id, within_s=60) == "succeeded"
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    workers = await conn.fetchval("SELECT count(DISTINCT worker_id) FROM job_attempts")
    assert workers == 1


@contextlib.asynccontextmanager
async def hearing(settings: Settings, tenant: str) -> AsyncIterator[list[dict[str, Any]]]:
    """The tenant's domain events, on real NATS, as they arrive."""
    heard: list[dict[str, Any]] = []

    async def on_event(msg: Msg) -> None:
        heard.append(json.loads(msg.data))

    nc = await nats.connect(settings.nats())
    try:
        await nc.subscribe(Names(namespace=settings.namespace).events_subjects(tenant),
                           cb=on_event)  # fmt: skip
        await nc.flush()
        yield heard
    finally:
        await nc.close()


async def _heard(heard: list[dict[str, Any]], kind: str, run_id: Any) -> dict[str, Any]:
    for _ in range(200):
        for event in heard:
            if event["type"] == kind and event["run_id"] == str(run_id):
                return event
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} for run {run_id}; heard {heard}")


async def test_runs_changed_from_the_cli_are_announced_like_the_apis(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    # The console follows runs by their domain events: a run cancelled, retried or reprocessed
    # from the command line must be announced as the API's actions are.
    run_id = await start_run(conn, owner)
    async with hearing(settings, "acme") as heard:
        code, _, err = await tideway(settings, "runs", "cancel", str(run_id))
        assert code == 0, err
        cancelled = await _heard(heard, "run.cancelled", run_id)
        assert cancelled["status"] == "cancelled" and cancelled["tenant"] == "acme"
        assert cancelled["session_id"] == str(owner.session_id)

        code, _, err = await tideway(settings, "runs", "retry", str(run_id))
        assert code == 0, err
        retry_id = await conn.fetchval("SELECT id FROM processing_runs WHERE retry_of = $1", run_id)
        assert (await _heard(heard, "run.pending", retry_id))["status"] == "pending"

        code, _, err = await tideway(settings, "runs", "cancel", str(retry_id))
        assert code == 0, err
        await _heard(heard, "run.cancelled", retry_id)
        code, out, err = await tideway(
            settings, "sessions", "reprocess", str(owner.session_id), "--tenant", "acme", "--json"
        )
        assert code == 0, err
        await _heard(heard, "run.pending", json.loads(out)["run_id"])


async def test_a_run_is_announced_running_when_a_worker_starts_it(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    async with hearing(settings, "acme") as heard:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "worker", "--concurrency", "4", "--executors", "placeholder",
            cwd=REPO_ROOT, env=_env(settings),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            run_id = await start_run(conn, owner, channel=queue.jobs_channel(settings))
            assert await wait_run(conn, run_id, within_s=60) == "succeeded"
            running = await _heard(heard, "run.running", run_id)
            assert running["status"] == "running"
            assert running["session_id"] == str(owner.session_id)
            await _heard(heard, "run.succeeded", run_id)
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 60)
    # Announced once: only the claim that started the run finds it.
    assert [e["type"] for e in heard if e["run_id"] == str(run_id)].count("run.running") == 1
