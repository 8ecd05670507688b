"""kill -9 a worker mid-job: the reaper takes the job back and exactly one dataset results."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import asyncpg
import pytest

from stages.jobs.dag import Dep, JobSpec
from streams.config import Settings
from streams.jobs import queue
from streams.jobs.executor import placeholder
from tests.conftest import REPO_ROOT
from tests.integration.jobs.conftest import Owner, job_states, start_run
from tests.integration.jobs.crash_worker import writer
from tests.integration.jobs.helpers import fast_settings, wait_for, wait_run, workers


@pytest.mark.slow
async def test_kill_9_mid_job_then_reap_then_exactly_one_dataset(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, tmp_path: Path
) -> None:
    root = str(tmp_path / "objects")
    marker = tmp_path / "promoted"
    dag = {
        "write": JobSpec(name="write"),
        "after": JobSpec(name="after", job_type="noop", deps=(Dep(on="write"),)),
    }
    run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
    victim = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.jobs.crash_worker", settings.postgres(),
        settings.namespace, root, str(marker), cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            while not marker.exists():
                assert victim.returncode is None, "the crash worker exited on its own"
                await asyncio.sleep(0.05)
        held = await conn.fetchrow("SELECT state, locked_by FROM jobs WHERE name = 'write'")
        assert tuple(held) == ("running", "crash-worker")
        os.kill(victim.pid, signal.SIGKILL)
        assert await victim.wait() == -signal.SIGKILL
    finally:
        if victim.returncode is None:
            victim.kill()
            await victim.wait()

    healthy = fast_settings(settings, stale_after_s=1.0)
    async with workers(healthy, {"write": writer(root), "noop": placeholder}):
        assert await wait_run(conn, run_id, within_s=30) == "succeeded"
        await wait_for(
            conn,
            "SELECT count(*) = 2 FROM job_attempts a JOIN jobs j "
            "ON j.id = a.job_id WHERE j.name = 'write'",
        )

    assert await job_states(conn, run_id) == {"write": "succeeded", "after": "succeeded"}
    attempts = await conn.fetch(
        "SELECT a.attempt_number, a.status, a.error_sub_type, a.worker_id, a.error_source "
        "FROM job_attempts a JOIN jobs j ON j.id = a.job_id WHERE j.name = 'write' "
        "ORDER BY a.attempt_number"
    )
    assert [tuple(a) for a in attempts] == [
        (1, "failed", "WORKER_LOST", "crash-worker", "reaper"),
        (2, "succeeded", None, "test-worker-0", None),
    ]
    rows = await conn.fetch(
        "SELECT d.name, d.storage_url, d.row_count FROM derived_datasets d "
        "JOIN jobs j ON j.id = d.job_id WHERE j.name = 'write'"
    )
    assert len(rows) == 1 and rows[0]["row_count"] == 100
    output = await conn.fetchval("SELECT output FROM jobs WHERE name = 'write'")
    assert output == {"reused": True}  # the retry found the killed attempt's promoted files
    promoted = list((tmp_path / "objects" / "datasets" / str(run_id)).glob("write-*"))
    assert len(promoted) == 1
    assert rows[0]["storage_url"].endswith("/numbers.parquet")
