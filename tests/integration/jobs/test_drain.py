"""SIGTERM drains with a deadline (issue 15 item 4): what outlasts it is released at once."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import asyncpg
import pytest

from stages.jobs.dag import JobSpec
from stages.jobs.retry import RetryPolicy
from streams.config import Settings
from streams.jobs import queue
from streams.jobs.executor import JobContext
from streams.jobs.model import JobResult
from tests.conftest import REPO_ROOT
from tests.integration.jobs.conftest import Owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_run, workers


@pytest.mark.slow
async def test_sigterm_releases_what_outlasts_the_drain_deadline(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, tmp_path: Path
) -> None:
    # One attempt of its own, like fusion: a deploy must not use it up.
    dag = {"long": JobSpec(name="long", retry=RetryPolicy(max_attempts=1))}
    run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
    marker = tmp_path / "started"
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.jobs.drain_worker", settings.postgres(),
        settings.namespace, "1.0", str(marker), cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            while not marker.exists():
                assert worker.returncode is None, "the worker exited on its own"
                await asyncio.sleep(0.05)
        worker.send_signal(signal.SIGTERM)  # a rolling deploy
        # The job would run for an hour: the worker exits because the deadline stopped it.
        async with asyncio.timeout(30):
            assert await worker.wait() == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()

    # Released, not left for the reaper: no heartbeat to go stale, due again at once.
    job = await conn.fetchrow(
        "SELECT state, attempt_count, lost_count, locked_by, heartbeat_at, "
        "next_run_at <= now() AS due FROM jobs WHERE run_id = $1",
        run_id,
    )
    assert job["state"] in ("retry_wait", "queued")
    assert (job["attempt_count"], job["lost_count"], job["heartbeat_at"], job["due"]) == (
        1, 1, None, True,
    )  # fmt: skip
    attempt = await conn.fetchrow(
        "SELECT status, error_sub_type, error_source, worker_id, retry_at IS NOT NULL AS retry "
        "FROM job_attempts"
    )
    assert tuple(attempt) == ("cancelled", "WORKER_DRAINED", "worker", "draining-worker", True)

    async def quick(ctx: JobContext) -> JobResult:
        return JobResult(summary={"attempt": ctx.job.attempt})

    # Another worker takes it over; the drained attempt did not count against its one.
    async with workers(fast_settings(settings), {"long": quick}):
        assert await wait_run(conn, run_id) == "succeeded"
    assert await conn.fetchval("SELECT output FROM jobs WHERE run_id = $1", run_id) == {
        "attempt": 2
    }
