"""The ``tideway worker`` and ``tideway runs`` commands, run as a user would (subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import asyncpg
import pytest

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.errors import ErrorSource, describe
from streams.cli.exit_codes import ExitCode
from streams.config import Settings
from streams.errors import UsageError
from streams.jobs import queue, run_actions
from tests.conftest import REPO_ROOT
from tests.integration.domain_events import heard_event, hearing
from tests.integration.jobs.conftest import Owner, start_run
from tests.integration.jobs.helpers import drive, wait_run

CLI = [sys.executable, "-c", "from streams.cli.main import main; main()"]


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "TIDEWAY_POSTGRES_DSN": settings.postgres(),
        "TIDEWAY_NATS_URL": settings.nats(),
        "TIDEWAY_NAMESPACE": settings.namespace,
        "TIDEWAY_OBJECT_STORE": settings.objects(),
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


async def test_runs_changed_from_the_cli_are_announced_like_the_apis(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    # The console follows runs by their domain events: a run cancelled, retried or reprocessed
    # from the command line must be announced as the API's actions are.
    run_id = await start_run(conn, owner)
    async with hearing(settings, "acme") as heard:
        code, _, err = await tideway(settings, "runs", "cancel", str(run_id))
        assert code == 0, err
        cancelled = await heard_event(heard, "run.cancelled", run_id)
        assert cancelled["status"] == "cancelled" and cancelled["tenant"] == "acme"
        assert cancelled["session_id"] == str(owner.session_id)

        code, _, err = await tideway(settings, "runs", "retry", str(run_id))
        assert code == 0, err
        retry_id = await conn.fetchval("SELECT id FROM processing_runs WHERE retry_of = $1", run_id)
        assert (await heard_event(heard, "run.pending", retry_id))["status"] == "pending"

        code, _, err = await tideway(settings, "runs", "cancel", str(retry_id))
        assert code == 0, err
        await heard_event(heard, "run.cancelled", retry_id)
        code, out, err = await tideway(
            settings, "sessions", "reprocess", str(owner.session_id), "--tenant", "acme", "--json"
        )
        assert code == 0, err
        await heard_event(heard, "run.pending", json.loads(out)["run_id"])


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
            running = await heard_event(heard, "run.running", run_id)
            assert running["status"] == "running"
            assert running["session_id"] == str(owner.session_id)
            await heard_event(heard, "run.succeeded", run_id)
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 60)
    # Announced once: only the claim that started the run finds it.
    assert [e["type"] for e in heard if e["run_id"] == str(run_id)].count("run.running") == 1


async def _snapshot(conn: asyncpg.Connection, run_id: Any, session_id: Any) -> tuple[Any, ...]:
    """Everything a cancel could rewrite: the run row, its jobs, the session's pointer."""
    run = await conn.fetchrow("SELECT * FROM processing_runs WHERE id = $1", run_id)
    jobs = await conn.fetch("SELECT * FROM jobs WHERE run_id = $1 ORDER BY name", run_id)
    session = await conn.fetchrow(
        "SELECT active_run_id, status, updated_at, metadata FROM sessions WHERE id = $1",
        session_id,
    )
    return dict(run), [dict(j) for j in jobs], dict(session)


async def test_cancelling_an_ended_run_is_refused_and_changes_nothing(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """Issue 27 (4): cancel on a succeeded run used to finalise it again - a new
    ``completed_at``, its features rewritten, ``run.succeeded`` announced again and, after a
    rollback, the session's pointer moved back to it. An ended run refuses: 409
    ``RUN_TERMINAL`` over HTTP, exit 1 and the code from the CLI, and nothing changes."""
    from streams.adapters import postgres
    from streams.api.keys import create_api_key
    from streams.objects import ObjectStore
    from streams.sessions.reprocess import rollback
    from tests.integration.sessions.test_api import api_client

    first = await start_run(conn, owner)
    await drive(conn)
    second = await start_run(conn, owner)
    await drive(conn)
    assert await wait_run(conn, second) == "succeeded"
    # Rolled back: the older run is active, the newer one (succeeded) is not.
    moved = await rollback(
        conn, tenant="acme", session_id=owner.session_id,
        store=ObjectStore(settings.objects()),
    )  # fmt: skip
    assert (moved.from_run, moved.to_run) == (second, first)
    cancelled = await start_run(conn, owner)
    await queue.cancel_run(
        conn, cancelled, dag=DEFAULT_DAG
    )  # nothing running: cancelled and finalised at once
    failed = await start_run(conn, owner)
    broken = describe("PARSE_FAILED", "bad input", retriable=False, source=ErrorSource.STAGE)
    await drive(conn, {"parse_raw": broken})
    assert await wait_run(conn, failed) == "failed"

    key = await create_api_key(conn, tenant="acme", name="test")
    headers = {"Authorization": f"Bearer {key.secret}"}
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=2))
    try:
        async with hearing(settings, "acme") as heard, api_client(settings, pool) as client:
            for run_id, status in ((second, "succeeded"), (first, "succeeded"),
                                   (cancelled, "cancelled"), (failed, "failed")):  # fmt: skip
                before = await _snapshot(conn, run_id, owner.session_id)
                assert before[0]["status"] == status and before[0]["completed_at"] is not None

                with pytest.raises(UsageError) as refused:
                    await run_actions.cancel_run(conn, run_id, channel=queue.jobs_channel(settings))
                assert refused.value.code == "RUN_TERMINAL" and status in refused.value.message

                code, out, err = await tideway(settings, "runs", "cancel", str(run_id))
                assert code == ExitCode.ERROR, (out, err)
                assert "RUN_TERMINAL" in err and status in err

                resp = await client.post(f"/v1/runs/{run_id}/cancel", headers=headers)
                problem = await resp.json()
                assert resp.status == 409 and problem["code"] == "RUN_TERMINAL", problem

                assert await _snapshot(conn, run_id, owner.session_id) == before, run_id
            await asyncio.sleep(0.5)  # what a re-announcement would take to arrive
        assert heard == []  # nothing announced: nothing happened
    finally:
        await pool.close()
    pointer = "SELECT active_run_id FROM sessions WHERE id = $1"
    assert await conn.fetchval(pointer, owner.session_id) == first
