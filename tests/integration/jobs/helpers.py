"""Worker helpers for the job engine tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.graph import Dag
from streams.config import Settings, WorkerSettings
from streams.jobs.executor import Executor
from streams.jobs.worker import run_worker


def fast_settings(settings: Settings, **worker: Any) -> Settings:
    """``settings`` with timings shrunk for tests (backoff 50 ms, heartbeats 100 ms)."""
    values = {
        "heartbeat_s": 0.1,
        "poll_interval_s": 0.2,
        "stale_after_s": 30.0,
        "tenant_max_running": 64,
        "heavy_max_running": 8,
        **worker,
    }
    return settings.model_copy(
        update={
            "worker": WorkerSettings(**values),
            "retry": settings.retry.model_copy(update={"job_backoff_s": (0.05,)}),
        }
    )


@asynccontextmanager
async def workers(
    settings: Settings,
    executors: Mapping[str, Executor],
    *,
    count: int = 1,
    concurrency: int = 4,
    pool: str | None = None,
    dag: Dag = DEFAULT_DAG,
) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(
            run_worker(
                settings,
                executors=executors,
                pool=pool,
                concurrency=concurrency,
                stop=stop,
                worker_id=f"test-worker-{i}",
                dag=dag,
            )
        )
        for i in range(count)
    ]
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)


async def wait_run(conn: asyncpg.Connection, run_id: uuid.UUID, *, within_s: float = 20) -> str:
    """Wait until the run is finalised (completed_at set); returns its status."""
    async with asyncio.timeout(within_s):
        while True:
            row = await conn.fetchrow(
                "SELECT status, completed_at FROM processing_runs WHERE id = $1", run_id
            )
            assert row is not None
            if row["completed_at"] is not None:
                return str(row["status"])
            await asyncio.sleep(0.02)


async def wait_for(conn: asyncpg.Connection, query: str, *args: Any, within_s: float = 20) -> Any:
    """Poll ``query`` until it returns a truthy value."""
    async with asyncio.timeout(within_s):
        while True:
            value = await conn.fetchval(query, *args)
            if value:
                return value
            await asyncio.sleep(0.02)


Behaviour = Any  # a JobResult, an AttemptFailure, or a callable(job) -> either


async def drive(
    conn: asyncpg.Connection,
    behaviours: Mapping[str, Behaviour] | None = None,
    *,
    worker: str = "driver",
    now: Any = None,
    limit: int = 50,
) -> list[str]:
    """Claim and settle jobs by hand until nothing is claimable; returns job names in order.

    A job named in ``behaviours`` gets that result (``AttemptFailure``: failed with it); the others
    succeed with an empty result.
    """
    from stages.jobs.errors import AttemptFailure
    from streams.jobs import queue
    from streams.jobs.model import JobResult
    from tests.integration.jobs.conftest import CH

    seen: list[str] = []
    for _ in range(limit):
        jobs = await queue.claim(
            conn, worker_id=worker, limit=8, tenant_max_running=64, heavy_max_running=8, now=now
        )
        if not jobs:
            return seen
        for job in jobs:
            seen.append(job.name)
            outcome = (behaviours or {}).get(job.name, JobResult())
            if callable(outcome):
                outcome = outcome(job)
            if isinstance(outcome, AttemptFailure):
                await queue.fail(
                    conn,
                    job,
                    outcome,
                    schedule=(30.0,),
                    u=0.0,
                    now=now,
                    channel=CH,
                    dag=DEFAULT_DAG,
                )
            else:
                await queue.complete(conn, job, outcome, now=now, channel=CH, dag=DEFAULT_DAG)
    raise AssertionError("drive: too many rounds")
