"""A worker process that stops on SIGTERM like ``tideway worker``: the drain test's subject.

Run as ``python -m tests.integration.jobs.drain_worker DSN NAMESPACE DRAIN_S MARKER``. Its one
job type, ``long``, writes ``MARKER`` when it starts and then runs far past any drain deadline
(an hour), checking for cancellation every 10 ms like a well-behaved long stage.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings, WorkerSettings
from streams.jobs.executor import JobContext
from streams.jobs.model import JobResult
from streams.jobs.worker import run_worker
from streams.system import stop_on_signals


def main() -> None:
    dsn, namespace, drain_s, marker = sys.argv[1:5]

    async def long(ctx: JobContext) -> JobResult:
        await asyncio.to_thread(Path(marker).write_text, str(ctx.job.id))
        for _ in range(360_000):
            ctx.checkpoint()
            await asyncio.sleep(0.01)
        return JobResult()

    async def serve() -> None:
        settings = Settings(
            postgres_dsn=dsn, namespace=namespace,
            worker=WorkerSettings(heartbeat_s=0.1, poll_interval_s=0.1, drain_s=float(drain_s)),
        )  # fmt: skip
        await run_worker(settings, dag=DEFAULT_DAG, executors={"long": long}, pool=None,
                         concurrency=2, stop=stop_on_signals(),
                         worker_id="draining-worker")  # fmt: skip

    asyncio.run(serve())


if __name__ == "__main__":
    main()
