"""A worker that writes and promotes its output, then hangs: the victim of the kill -9 test.

Run as ``python -m tests.integration.jobs.crash_worker DSN NAMESPACE OBJECT_ROOT MARKER``.
The executor is shared with the test's healthy worker (``writer``), so both attempts compute
the same idempotency key and the second one finds the first one's promoted output.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pyarrow as pa

from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings, WorkerSettings
from streams.jobs.executor import Executor, JobContext, threaded
from streams.jobs.model import DatasetRecord, JobResult
from streams.jobs.worker import run_worker
from streams.objects import ObjectStore
from streams.sessions.datasets import idempotency_key, output_prefix, write_outputs


def writer(root: str, *, hang_after_promote: Path | None = None) -> Executor:
    """Write a 100-row dataset under the job's idempotency key (reusing an earlier attempt's)."""

    def write(ctx: JobContext) -> JobResult:
        store = ObjectStore(root)
        run_id = str(ctx.job.run_id)
        key = idempotency_key(
            run_id=run_id,
            job_type=ctx.job.job_type,
            input_hashes=ctx.input_hashes,
            config=ctx.config,
            versions=ctx.versions.as_json(),
        )
        outputs = write_outputs(
            store,
            output_prefix(run_id, ctx.job.job_type, key),
            tables={"numbers": pa.table({"n": list(range(100))})},
            summary={"rows": 100},
            header={"run_id": run_id, "job": ctx.job.name},
        )
        if hang_after_promote is not None:
            hang_after_promote.write_text(str(ctx.job.id))
            time.sleep(3600)  # promoted but never completed: the process dies here
        return JobResult(
            summary={"reused": outputs.reused},
            idempotency_key=key,
            datasets=[
                DatasetRecord(
                    name=f.name,
                    storage_url=f.url,
                    content_hash=f.sha256,
                    schema_version=f.schema_version,
                    row_count=f.rows,
                    bytes=f.size,
                )
                for f in outputs.datasets
            ],
        )

    return threaded(write)


def main() -> None:
    dsn, namespace, root, marker = sys.argv[1:5]
    settings = Settings(
        postgres_dsn=dsn, namespace=namespace,
        worker=WorkerSettings(heartbeat_s=0.1, poll_interval_s=0.1, stale_after_s=1.0),
    )  # fmt: skip
    executors = {"write": writer(root, hang_after_promote=Path(marker))}
    asyncio.run(
        run_worker(
            settings,
            executors=executors,
            pool=None,
            concurrency=1,
            stop=asyncio.Event(),
            worker_id="crash-worker",
            dag=DEFAULT_DAG,
        )
    )


if __name__ == "__main__":
    main()
