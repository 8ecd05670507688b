"""A tenant's active-run limit (spec 000 §12): runs beyond it wait, pending, never refused."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from streams.adapters import postgres
from streams.config import QuotaSettings, Settings
from streams.jobs import queue
from streams.jobs.executor import JobContext
from streams.jobs.model import JobResult
from tests.integration.jobs.conftest import CH, Owner, make_owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_run, workers

ONE = {"a": JobSpec(name="a")}
CHAIN = {"a": JobSpec(name="a"), "b": JobSpec(name="b", deps=(Dep(on="a"),))}


async def claim(conn: asyncpg.Connection, *, max_active_runs: int | None) -> list[queue.ClaimedJob]:
    return await queue.claim(
        conn, worker_id="w", limit=10, tenant_max_running=64, heavy_max_running=8,
        max_active_runs=max_active_runs,
    )  # fmt: skip


async def statuses(conn: asyncpg.Connection, runs: list[uuid.UUID]) -> list[str]:
    rows = await conn.fetch("SELECT id, status FROM processing_runs WHERE id = ANY($1)", runs)
    by_id = {r["id"]: r["status"] for r in rows}
    return [by_id[run] for run in runs]


async def test_new_runs_are_admitted_best_first_up_to_the_limit(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    low = await start_run(conn, owner, dag=ONE, priority=0)
    high = await start_run(conn, owner, dag=ONE, priority=5)
    mid = await start_run(conn, owner, dag=ONE, priority=3)
    claimed = await claim(conn, max_active_runs=2)
    assert {job.run_id for job in claimed} == {high, mid}
    assert await statuses(conn, [low, high, mid]) == ["pending", "running", "running"]
    assert await claim(conn, max_active_runs=2) == []  # at the limit: low waits, queued
    assert await conn.fetchval("SELECT state FROM jobs WHERE run_id = $1", low) == "queued"

    await queue.complete(
        conn, claimed[0], JobResult(), channel=CH, dag=DEFAULT_DAG
    )  # one run ends...
    (admitted,) = await claim(conn, max_active_runs=2)  # ...and the waiting one starts
    assert admitted.run_id == low


async def test_a_tenant_at_its_limit_still_runs_its_started_runs(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    """Waiting runs of a higher priority never block the next jobs of a started run: it must
    be able to finish and free its place."""
    started = await start_run(conn, owner, dag=CHAIN, priority=0)
    (first,) = await claim(conn, max_active_runs=1)
    urgent = [await start_run(conn, owner, dag=CHAIN, priority=50) for _ in range(12)]
    await queue.complete(conn, first, JobResult(), channel=CH, dag=DEFAULT_DAG)
    (second,) = await claim(conn, max_active_runs=1)
    assert (second.run_id, second.name) == (started, "b")
    await queue.complete(conn, second, JobResult(), channel=CH, dag=DEFAULT_DAG)
    assert await wait_run(conn, started, within_s=5) == "succeeded"
    (next_job,) = await claim(conn, max_active_runs=1)
    assert next_job.run_id in urgent


async def test_the_tenants_own_limit_wins_and_other_tenants_are_not_held(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    await conn.execute("UPDATE tenants SET max_active_runs = 1 WHERE id = $1", owner.tenant_id)
    other = await make_owner(conn, tenant="globex")
    mine = [await start_run(conn, owner, dag=ONE) for _ in range(3)]
    theirs = [await start_run(conn, other, dag=ONE) for _ in range(3)]
    claimed = await claim(conn, max_active_runs=2)
    runs = {job.run_id for job in claimed}
    assert len(runs & set(mine)) == 1  # the tenant's column (1) over the default (2)
    assert len(runs & set(theirs)) == 2
    # No default: only tenants' own limits apply.
    more = {job.run_id for job in await claim(conn, max_active_runs=None)}
    assert more == set(theirs) - runs


async def test_workers_never_run_more_of_a_tenants_runs_than_its_limit(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, pg_dsn: str
) -> None:
    async def step(ctx: JobContext) -> JobResult:
        await asyncio.sleep(0.02)
        return JobResult()

    limited = fast_settings(settings).model_copy(
        update={"quotas": QuotaSettings(max_active_runs=2)}
    )
    dag = {
        "a": JobSpec(name="a", job_type="step"),
        "b": JobSpec(name="b", job_type="step", deps=(Dep(on="a"),)),
    }
    runs = [
        await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
        for _ in range(8)
    ]
    most = 0
    async with workers(limited, {"step": step}, count=2, concurrency=8):

        async def watch() -> None:
            nonlocal most
            watcher_conn = await postgres.connect(pg_dsn)
            try:
                while True:
                    running = await watcher_conn.fetchval(
                        "SELECT count(*) FROM processing_runs WHERE status = 'running'"
                    )
                    most = max(most, running)
                    await asyncio.sleep(0.005)
            finally:
                await watcher_conn.close()

        watcher = asyncio.create_task(watch())
        try:
            for run_id in runs:
                assert await wait_run(conn, run_id, within_s=60) == "succeeded"
        finally:
            watcher.cancel()
    assert most == 2  # two at a time, every one of the eight ran: none was refused
