"""Lost workers (issue 15 item 2): per-type stale thresholds, lost attempts counted apart."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from stages.jobs.graph import Dag
from streams.config import Settings
from streams.jobs import queue
from tests.conftest import REPO_ROOT
from tests.integration.jobs.conftest import CH, Owner, job_states, start_run
from tests.integration.jobs.crash_worker import writer
from tests.integration.jobs.helpers import fast_settings, wait_run, workers

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.slow
async def test_kill_9_does_not_use_up_a_one_attempt_job(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, tmp_path: Path
) -> None:
    # Fusion's policy - one attempt of its own - on the crash worker's job type, with a stale
    # threshold of its own: the healthy worker sets no global override.
    fusion = DEFAULT_DAG["fuse_gnss_imu"]
    assert fusion.retry.max_attempts == 1
    dag = {"fuse": JobSpec(name="fuse", job_type="write", retry=fusion.retry, stale_after_s=1.0,
                           pool="heavy", heavy=True)}  # fmt: skip
    run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
    marker = tmp_path / "promoted"
    root = str(tmp_path / "objects")
    victim = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.jobs.crash_worker", settings.postgres(),
        settings.namespace, root, str(marker), cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            while not marker.exists():
                assert victim.returncode is None, "the crash worker exited on its own"
                await asyncio.sleep(0.05)
        os.kill(victim.pid, signal.SIGKILL)  # an OOM kill, a node gone
        assert await victim.wait() == -signal.SIGKILL
    finally:
        if victim.returncode is None:
            victim.kill()
            await victim.wait()

    healthy = fast_settings(settings, stale_after_s=None)
    assert healthy.worker.stale_after_s is None
    # The worker runs the DAG the run was made from, so it reaps at half that job type's own
    # threshold (not the default DAG's thirty seconds, which outlasted this wait now and then).
    async with workers(healthy, {"write": writer(root)}, dag=Dag(dag.values())):
        assert await wait_run(conn, run_id, within_s=30) == "succeeded"

    assert await job_states(conn, run_id) == {"fuse": "succeeded"}
    job = await conn.fetchrow(
        "SELECT attempt_count, lost_count, max_attempts, stale_after_s FROM jobs "
        "WHERE run_id = $1", run_id,
    )  # fmt: skip
    assert tuple(job) == (2, 1, 1, 1.0)
    attempts = await conn.fetch(
        "SELECT attempt_number, status, error_sub_type, error_source, step_type "
        "FROM job_attempts ORDER BY attempt_number"
    )
    assert [tuple(a) for a in attempts] == [
        (1, "failed", "WORKER_LOST", "reaper", "write"),
        (2, "succeeded", None, None, "write"),
    ]


async def test_each_job_type_is_reaped_after_its_own_threshold(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    dag = {
        "quick": JobSpec(name="quick", stale_after_s=60),
        "long": JobSpec(name="long", stale_after_s=300),
    }
    await start_run(conn, owner, dag=dag)
    claimed = await queue.claim(
        conn, worker_id="w", limit=2, tenant_max_running=8, heavy_max_running=8, now=at(0)
    )
    assert len(claimed) == 2
    reaped = await queue.reap(
        conn, schedule=(5.0,), rand=lambda: 0.0, now=at(90), channel=CH, dag=DEFAULT_DAG
    )
    assert [(r.name, r.code) for r in reaped] == [("quick", "WORKER_LOST")]
    reaped = await queue.reap(
        conn, dag=DEFAULT_DAG, schedule=(5.0,), rand=lambda: 0.0, now=at(301), channel=CH
    )
    assert [(r.name, r.code) for r in reaped] == [("long", "WORKER_LOST")]


async def test_lost_attempts_have_their_own_bound(conn: asyncpg.Connection, owner: Owner) -> None:
    run_id = await start_run(
        conn, owner, dag={"fuse": JobSpec(name="fuse", stale_after_s=10, critical=False)}
    )
    outcomes = []
    for round_ in range(3):
        start = 100.0 * round_
        await queue.promote(conn, now=at(start), channel=CH)
        [job] = await queue.claim(
            conn, worker_id=f"w{round_}", limit=1, tenant_max_running=8, heavy_max_running=8,
            now=at(start),
        )  # fmt: skip
        assert job.attempt == round_ + 1 and job.own_attempt == 1
        [r] = await queue.reap(
            conn, dag=DEFAULT_DAG, max_lost=3, schedule=(5.0,), rand=lambda: 0.0,
            now=at(start + 11), channel=CH,
        )  # fmt: skip
        outcomes.append((r.code, r.state))
    # Lost twice: queued again at once each time; the third loss fails it (a job that takes
    # every worker down with it must not loop for ever).
    assert outcomes == [
        ("WORKER_LOST", "retry_wait"),
        ("WORKER_LOST", "retry_wait"),
        ("WORKER_LOST", "failed"),
    ]
    row = await conn.fetchrow(
        "SELECT state, attempt_count, lost_count, last_error_code FROM jobs WHERE run_id = $1",
        run_id,
    )
    assert tuple(row) == ("failed", 3, 3, "WORKER_LOST")
    retry_at = await conn.fetch("SELECT retry_at FROM job_attempts ORDER BY attempt_number")
    # Each retry was scheduled for the moment of the loss, not after a backoff.
    assert [r["retry_at"] for r in retry_at] == [at(11), at(111), None]
