"""The ``tideway worker`` and ``tideway runs`` commands, run as a user would (subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import asyncpg

from stages.jobs.errors import ErrorSource, describe
from streams.config import Settings
from streams.jobs import queue
from tests.conftest import REPO_ROOT
from tests.integration.jobs.conftest import Owner, start_run
from tests.integration.jobs.helpers import drive, wait_run

CLI = [sys.executable, "-c", "from streams.cli.main import main; main()"]


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "TIDEWAY_POSTGRES_DSN": settings.postgres(),
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
