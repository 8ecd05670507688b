"""Outputs of an attempt whose job ends without success are removed (issue 27 defect 8).

The executor here promotes a real output directory (``write_outputs``) and declares it
(``ctx.writes_to``), as the session stage executors do; each test then arranges for the
completion to be refused, or the attempt to fail, in the way the fault run met it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pyarrow as pa

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from stages.jobs.errors import ErrorSource
from streams.adapters import postgres
from streams.config import Settings
from streams.errors import TransientError
from streams.jobs import queue
from streams.jobs.executor import Executor, JobContext
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore
from streams.sessions.datasets import write_outputs
from tests.integration.jobs.conftest import Owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_for, wait_run, workers


async def _until(check: Callable[[], bool], *, within_s: float = 20) -> None:
    async with asyncio.timeout(within_s):
        while True:
            if check():
                return
            await asyncio.sleep(0.02)


def _outputs_dir(settings: Settings, run_id: uuid.UUID) -> Path:
    return Path(settings.objects()) / "datasets" / str(run_id)


def _writer(
    settings: Settings, then: Callable[[JobContext], Awaitable[None]] | None = None
) -> Executor:
    """Promote one dataset under ``datasets/<run>/<job>-k`` (declared first), then ``then``."""

    async def write(ctx: JobContext) -> JobResult:
        store = ObjectStore(settings.objects())
        prefix = f"datasets/{ctx.job.run_id}/{ctx.job.name}-k"
        ctx.writes_to(store.url(prefix))
        outputs = await asyncio.to_thread(
            write_outputs, store, prefix, tables={"numbers": pa.table({"n": [1, 2, 3]})},
            summary={}, header={"job": ctx.job.name},
        )  # fmt: skip
        if then is not None:
            await then(ctx)
        return JobResult(
            summary={"reused": outputs.reused},
            datasets=[
                DatasetRecord(name=f.name, storage_url=f.url, content_hash=f.sha256,
                              schema_version=f.schema_version, row_count=f.rows)
                for f in outputs.datasets
            ],
        )  # fmt: skip

    return write


async def test_a_completion_refused_by_a_cancel_leaves_no_outputs(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """The fault run's case: the stage finished and promoted inside the window before its worker
    heard of the cancel, so its completion was refused and its folder stayed for good."""
    run_id = await start_run(conn, owner, dag={"write": JobSpec(name="write")},
                             channel=queue.jobs_channel(settings))  # fmt: skip

    async def cancel_unheard(ctx: JobContext) -> None:
        # No channel: the worker is not woken, and its heartbeat is far away.
        other = await postgres.connect(settings.postgres())
        try:
            await queue.cancel_run(other, ctx.job.run_id, dag=DEFAULT_DAG)
        finally:
            await other.close()

    async with workers(fast_settings(settings, heartbeat_s=600.0),
                       {"write": _writer(settings, cancel_unheard)}):  # fmt: skip
        assert await wait_run(conn, run_id) == "cancelled"
        await wait_for(conn, "SELECT count(*) = 1 FROM job_attempts WHERE status = 'cancelled'")
        await _until(lambda: not any(_outputs_dir(settings, run_id).iterdir()))
    assert await conn.fetchval("SELECT count(*) FROM derived_datasets") == 0


async def test_an_attempt_whose_job_is_lost_for_good_leaves_no_outputs(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """Reaped while it computes (its heartbeats stopped), with no lost attempt left: the job
    fails with WORKER_LOST, and the attempt's completion, when it comes, is refused."""
    run_id = await start_run(conn, owner, dag={"write": JobSpec(name="write")},
                             channel=queue.jobs_channel(settings))  # fmt: skip

    async def outlive_the_reaper(ctx: JobContext) -> None:
        other = await postgres.connect(settings.postgres())
        try:
            await wait_for(other, "SELECT state = 'failed' FROM jobs WHERE id = $1", ctx.job.id)
        finally:
            await other.close()

    tight = fast_settings(settings, heartbeat_s=600.0, stale_after_s=0.5, max_lost=1)
    async with workers(tight, {"write": _writer(settings, outlive_the_reaper)}):
        assert await wait_run(conn, run_id) == "failed"
        await _until(lambda: not any(_outputs_dir(settings, run_id).iterdir()))
    code = await conn.fetchval("SELECT last_error_code FROM jobs WHERE run_id = $1", run_id)
    assert code == "WORKER_LOST"


async def test_an_attempt_that_will_be_retried_keeps_its_outputs_for_the_retry(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """Only an ended job's outputs go: a retry computes the same key and reuses them."""
    run_id = await start_run(conn, owner, dag={"write": JobSpec(name="write")},
                             channel=queue.jobs_channel(settings))  # fmt: skip

    async def fail_first(ctx: JobContext) -> None:
        if ctx.job.attempt == 1:
            raise TransientError("the store went away after the promotion", code="STORAGE_X")

    async with workers(fast_settings(settings), {"write": _writer(settings, fail_first)}):
        assert await wait_run(conn, run_id) == "succeeded"
    assert await conn.fetchval("SELECT output FROM jobs WHERE run_id = $1", run_id) == {
        "reused": True
    }
    url = await conn.fetchval("SELECT storage_url FROM derived_datasets WHERE run_id = $1", run_id)
    assert Path(ObjectStore(settings.objects()).key(url)).parent.name == "write-k"
    assert (Path(settings.objects()) / ObjectStore(settings.objects()).key(url)).exists()


async def test_cancelling_a_job_wakes_its_worker_at_once(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """A cancel reaches the running job through a notification, not the next heartbeat (here
    ten minutes away): the job is acknowledged and its outputs removed."""
    run_id = await start_run(conn, owner, dag={"write": JobSpec(name="write")},
                             channel=queue.jobs_channel(settings))  # fmt: skip
    forever = asyncio.Event()

    async def hang(ctx: JobContext) -> None:
        await forever.wait()  # until the worker cancels the task

    async with workers(fast_settings(settings, heartbeat_s=600.0),
                       {"write": _writer(settings, hang)}):  # fmt: skip
        await wait_for(conn, "SELECT state = 'running' FROM jobs WHERE run_id = $1", run_id)
        await _until(lambda: any(_outputs_dir(settings, run_id).glob("write-k")))
        job_id = await conn.fetchval("SELECT id FROM jobs WHERE run_id = $1", run_id)
        state = await queue.cancel_job(conn, job_id, dag=DEFAULT_DAG, source=ErrorSource.OPERATOR,
                                       channel=queue.jobs_channel(settings))  # fmt: skip
        assert state.value == "cancel_requested"
        assert await wait_run(conn, run_id, within_s=30) == "cancelled"
        await _until(lambda: not any(_outputs_dir(settings, run_id).iterdir()))
