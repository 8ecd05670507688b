"""The worker runs whole runs: chaining, retries, soft timeouts, cancellation, NOTIFY."""

from __future__ import annotations

import asyncio
import gc
import random
import threading

import asyncpg

from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from streams.config import Settings
from streams.errors import TransientError
from streams.jobs import queue
from streams.jobs.executor import JobContext, placeholder_executors, threaded
from streams.jobs.model import JobResult
from tests.integration.jobs.conftest import Owner, job_states, start_run
from tests.integration.jobs.helpers import fast_settings, wait_for, wait_run, workers


async def test_a_worker_runs_the_default_dag_to_success(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner, channel=queue.jobs_channel(settings))
    async with workers(fast_settings(settings), placeholder_executors(DEFAULT_DAG)):
        assert await wait_run(conn, run_id) == "succeeded"
    assert set((await job_states(conn, run_id)).values()) == {"succeeded"}
    session = await conn.fetchrow("SELECT * FROM sessions WHERE id = $1", owner.session_id)
    assert session["active_run_id"] == run_id and session["query_ready"]
    # Placeholders pass their inputs through: each sees its ancestors' summaries.
    output = await conn.fetchval(
        "SELECT output FROM jobs WHERE run_id = $1 AND name = 'detect_laps'", run_id
    )
    assert output["placeholder"] is True
    assert {"parse_raw", "downsample_L0", "fuse_gnss_imu"} <= set(output["upstream"])
    assert "downsample_L1" not in output["upstream"]  # a parallel branch, not an ancestor


async def test_transient_failure_is_retried_by_the_worker(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    calls: list[int] = []

    async def flaky(ctx: JobContext) -> JobResult:
        calls.append(ctx.job.attempt)
        if ctx.job.attempt == 1:
            raise TransientError("object store hiccup", code="STORAGE_UNAVAILABLE")
        return JobResult(summary={"attempt": ctx.job.attempt})

    run_id = await start_run(
        conn, owner, dag={"flaky": JobSpec(name="flaky")}, channel=queue.jobs_channel(settings)
    )
    async with workers(fast_settings(settings), {"flaky": flaky}):
        assert await wait_run(conn, run_id) == "succeeded"
    assert calls == [1, 2]
    rows = await conn.fetch(
        "SELECT status, error_sub_type FROM job_attempts ORDER BY attempt_number"
    )
    assert [tuple(r) for r in rows] == [("failed", "STORAGE_UNAVAILABLE"), ("succeeded", None)]


async def test_soft_timeout_is_a_retriable_timed_out_attempt(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    async def slow_once(ctx: JobContext) -> JobResult:
        if ctx.job.attempt == 1:
            await asyncio.sleep(30)
        return JobResult()

    dag = {"slow": JobSpec(name="slow", soft_timeout_s=0.2, hard_timeout_s=60)}
    run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
    async with workers(fast_settings(settings), {"slow": slow_once}):
        assert await wait_run(conn, run_id) == "succeeded"
    rows = await conn.fetch(
        "SELECT status, error_sub_type, error_type FROM job_attempts ORDER BY attempt_number"
    )
    assert [tuple(r) for r in rows] == [
        ("timed_out", "SOFT_TIMEOUT", "timeout"),
        ("succeeded", None, None),
    ]


async def test_cancelling_a_run_stops_a_job_at_its_checkpoint(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    started = asyncio.Event()
    checkpoints = 0

    async def long(ctx: JobContext) -> JobResult:
        nonlocal checkpoints
        started.set()
        for _ in range(3000):
            ctx.checkpoint()
            checkpoints += 1
            await asyncio.sleep(0.01)
        return JobResult()

    dag = {"long": JobSpec(name="long"), "after": JobSpec(name="after", deps=(Dep(on="long"),))}
    run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
    async with workers(fast_settings(settings), {"long": long, "after": long}):
        await asyncio.wait_for(started.wait(), 10)
        await queue.cancel_run(conn, run_id, dag=DEFAULT_DAG)
        assert await wait_run(conn, run_id) == "cancelled"
    assert await job_states(conn, run_id) == {"long": "cancelled", "after": "cancelled"}
    assert 0 < checkpoints < 3000
    attempt = await conn.fetchrow("SELECT status, error_sub_type, error_source FROM job_attempts")
    # A user's cancel: the attempt says who asked for it, not who noticed (spec 004).
    assert tuple(attempt) == ("cancelled", "CANCELLED", "operator")


async def test_many_workers_never_run_a_job_twice(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    executed: list[tuple[object, int]] = []

    async def record(ctx: JobContext) -> JobResult:
        executed.append((ctx.job.id, ctx.job.attempt))
        await asyncio.sleep(random.random() * 0.005)
        return JobResult()

    dag = {f"n{i}": JobSpec(name=f"n{i}", job_type="record") for i in range(6)}
    dag["tail"] = JobSpec(
        name="tail", job_type="record", deps=tuple(Dep(on=f"n{i}") for i in range(6))
    )
    runs = [
        await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
        for _ in range(30)
    ]
    async with workers(fast_settings(settings), {"record": record}, count=4, concurrency=8):
        for run_id in runs:
            assert await wait_run(conn, run_id, within_s=60) == "succeeded"
    assert len(executed) == 30 * 7
    assert len({job_id for job_id, _ in executed}) == 30 * 7
    assert {attempt for _, attempt in executed} == {1}
    assert await conn.fetchval("SELECT count(*) FROM job_attempts") == 30 * 7
    workers_used = await conn.fetchval("SELECT count(DISTINCT worker_id) FROM job_attempts")
    assert workers_used > 1


async def test_notify_wakes_an_idle_worker_long_before_its_poll(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    slow_poll = fast_settings(settings, poll_interval_s=120.0)
    async with workers(slow_poll, {"noop": placeholder_executors(DEFAULT_DAG)["parse_raw"]}):
        await asyncio.sleep(0.5)  # the worker has claimed nothing and sleeps for its poll
        run_id = await start_run(
            conn, owner, dag={"noop": JobSpec(name="noop")}, channel=queue.jobs_channel(settings)
        )
        assert await wait_run(conn, run_id, within_s=10) == "succeeded"


async def test_threaded_executors_run_off_the_event_loop(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def crunch(ctx: JobContext) -> JobResult:
        ctx.checkpoint()
        seen.append(threading.get_ident())
        return JobResult(summary={"sum": sum(range(10_000))})

    run_id = await start_run(
        conn, owner, dag={"crunch": JobSpec(name="crunch")}, channel=queue.jobs_channel(settings)
    )
    async with workers(fast_settings(settings), {"crunch": threaded(crunch)}):
        assert await wait_run(conn, run_id) == "succeeded"
    assert seen and seen[0] != loop_thread


async def test_a_worker_only_takes_its_pool(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    dag = {
        "io_job": JobSpec(name="io_job", job_type="noop", pool="io"),
        "cpu_job": JobSpec(name="cpu_job", job_type="noop", pool="cpu"),
    }
    run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
    noop = placeholder_executors(DEFAULT_DAG)["parse_raw"]
    async with workers(fast_settings(settings), {"noop": noop}, pool="io"):
        await wait_for(conn, "SELECT state = 'succeeded' FROM jobs WHERE name = 'io_job'")
        await asyncio.sleep(0.5)
        assert (await job_states(conn, run_id))["cpu_job"] == "queued"
    async with workers(fast_settings(settings), {"noop": noop}, pool="cpu"):
        assert await wait_run(conn, run_id) == "succeeded"


async def test_a_worker_abandons_a_job_reaped_from_under_it(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    first_started = asyncio.Event()
    first_cancelled = asyncio.Event()

    async def stuck_once(ctx: JobContext) -> JobResult:
        if ctx.job.attempt == 1:
            first_started.set()
            try:
                await asyncio.sleep(60)  # a stall: heartbeats go on, but nothing finishes
            except asyncio.CancelledError:
                first_cancelled.set()
                raise
        return JobResult(summary={"attempt": ctx.job.attempt})

    run_id = await start_run(conn, owner, dag={"stuck": JobSpec(name="stuck")},
                             channel=queue.jobs_channel(settings))  # fmt: skip
    async with workers(fast_settings(settings), {"stuck": stuck_once}):
        await asyncio.wait_for(first_started.wait(), 10)
        # An operator-grade reaper pass with a zero staleness threshold takes the job back.
        [reaped] = await queue.reap(conn, dag=DEFAULT_DAG, stale_after_s=0.0, schedule=(0.0,),
                                    rand=lambda: 0.0,
                                    channel=queue.jobs_channel(settings))  # fmt: skip
        assert reaped.code == "WORKER_LOST"
        await asyncio.wait_for(first_cancelled.wait(), 10)  # the worker let go of attempt 1
        assert await wait_run(conn, run_id) == "succeeded"
    rows = await conn.fetch("SELECT attempt_number, status, error_sub_type FROM job_attempts "
                            "ORDER BY attempt_number")  # fmt: skip
    assert [tuple(r) for r in rows] == [(1, "failed", "WORKER_LOST"), (2, "succeeded", None)]
    assert await conn.fetchval("SELECT output FROM jobs WHERE run_id = $1", run_id) == {
        "attempt": 2
    }


async def test_the_worker_tunes_the_collector_while_it_runs(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """Jobs run with the collector tuned (streams.collector); the process's own thresholds are
    back once the worker returns."""
    seen: list[tuple[int, int, int]] = []

    async def look(ctx: JobContext) -> JobResult:
        seen.append(gc.get_threshold())
        return JobResult()

    before = gc.get_threshold()
    gc.set_threshold(600, 9, 9)
    try:
        run_id = await start_run(
            conn, owner, dag={"look": JobSpec(name="look")}, channel=queue.jobs_channel(settings)
        )
        async with workers(fast_settings(settings), {"look": look}):
            assert await wait_run(conn, run_id) == "succeeded"
        assert seen == [(50_000, 20, 100)]
        assert gc.get_threshold() == (600, 9, 9)
    finally:
        gc.set_threshold(*before)
