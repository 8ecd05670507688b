"""One executor per job type of the session DAG, wiring the pure stages into the job engine.

Theory of operation
-------------------
For the fourteen pure-stage job types the executor turns the engine's :class:`JobContext`
into a picklable :class:`~streams.sessions.stage_job.StageJob` and runs its body in a compute
pool - a process pool by default, so CPU-heavy stages run in parallel and never on the event
loop (``compute="thread"`` keeps them in threads, which tests use for speed). The body reads
the inputs it uses (sha256-verified), runs the stage, writes each output table as Parquet to a
temporary directory and promotes it atomically; the executor returns a ``JobResult`` whose
``DatasetRecord`` list the engine records in the completing transaction.

- **Idempotency key** (spec 000 §8.1): sha256 over the run, the job, the content hashes of
  everything the job may read (artifacts and every upstream dataset), the run config and the
  pinned versions. It names the output directory, so a retry finds and reuses the verified
  outputs of an attempt that died after promoting them (no second copy is written).
- **Dataset names** are unique per run: the canonical streams that ``parse_raw``,
  ``normalise_units`` and ``time_align`` each emit (``gnss``, ``imu``, ``aux``) are recorded
  as ``<job>.<stream>`` (``time_align.gnss``); every other dataset keeps the stage's name
  (``gnss_L1``, ``fused``, ``laps``...). Stages see the plain names, the nearest ancestor's
  dataset winning (``time_align.gnss`` over ``parse_raw.gnss``).
- **Errors**: a stage's ``SessionStageError`` becomes a non-retriable ``StageError`` with the
  same code (the engine fails the job, no retry); storage trouble is a ``TransientError``
  (retry with backoff); a sha256 mismatch is ``CHECKSUM_MISMATCH`` and never retried.

``materialise_clickhouse`` and ``publish_session`` are I/O jobs and run on the event loop
(``streams.sessions.materialise`` / ``publish_session``, which borrow this table's pools
through :class:`~streams.sessions.executor_resources.ExecutorResources`); chDB allows one
engine per process, so the ClickHouse load must stay in the process that owns it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Executor as PoolExecutor
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import datetime
from typing import Any, Final, Literal

from stages.batch import canonical
from stages.errors import StageError
from stages.jobs.dag import DEFAULT_DAG, topological_order
from streams.config import Settings
from streams.errors import PermanentError, TransientError
from streams.jobs.executor import Executor, JobContext
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore
from streams.sessions.datasets import DatasetFile, idempotency_key, output_prefix
from streams.sessions.materialise import materialise_executor
from streams.sessions.publish_session import publish_executor
from streams.sessions.stage_job import InputRef, StageJob, StageRun, run_stage_job

__all__ = ["STAGES", "SessionExecutors", "default_executors", "local_name", "record_name"]

STAGES: Final[Mapping[str, str]] = {
    "artifact_validate": "stages.batch.artifact_validate:run",
    "artifact_classify": "stages.batch.artifact_classify:run",
    "parse_raw": "stages.batch.parse_raw:run",
    "normalise_units": "stages.batch.normalise_units:run",
    "time_align": "stages.batch.time_align:run",
    "downsample_L0": "stages.batch.downsample:run_l0",
    "downsample_L1": "stages.batch.downsample:run_l1",
    "downsample_L2": "stages.batch.downsample:run_l2",
    "fuse_gnss_imu": "stages.batch.fuse_gnss_imu:run",
    "fuse_quality_summary": "stages.batch.fuse_quality_summary:run",
    "detect_laps": "stages.batch.detect_laps:run",
    "detect_segments": "stages.batch.detect_segments:run",
    "compute_metrics": "stages.batch.compute_metrics:run",
    "build_indexes": "stages.batch.build_indexes:run",
}
"""Job type -> ``module:function`` of its pure stage."""

_ORDER: Final = {name: i for i, name in enumerate(topological_order(DEFAULT_DAG))}

Compute = Literal["process", "thread"]


def record_name(job: str, name: str) -> str:
    """The run-unique name a stage's dataset ``name`` is recorded under."""
    return f"{job}.{name}" if name in canonical.STREAMS else name


def local_name(job: str, recorded: str) -> str:
    """The name a stage sees for the dataset ``recorded`` by job ``job``."""
    return recorded.removeprefix(f"{job}.")


def _when(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def _record(job: str, d: DatasetFile) -> DatasetRecord:
    return DatasetRecord(
        name=record_name(job, d.name),
        dataset_type=d.name,
        storage_url=d.url,
        content_hash=d.sha256,
        schema_version=d.schema_version,
        row_count=d.rows,
        bytes=d.size,
        stats={"rows": d.rows},
        time_range_start=_when(d.time_start),
        time_range_end=_when(d.time_end),
    )


def _raise(run: StageRun) -> None:
    f = run.failure
    assert f is not None
    if f.source == "stage":
        raise StageError(f.message, code=f.code, retriable=f.retriable)
    if f.retriable:
        raise TransientError(f.message, code=f.code)
    raise PermanentError(f.message, code=f.code)


class SessionExecutors(Mapping[str, Executor]):
    """The executors of every session job type, sharing one compute pool and one DB pool.

    Pools are created on first use and released by :meth:`aclose` (or at interpreter exit).
    """

    def __init__(
        self, settings: Settings, *, compute: Compute = "process", workers: int | None = None
    ) -> None:
        self.settings = settings
        self.compute = compute
        self.workers = workers or max(1, settings.worker.concurrency)
        self.store = ObjectStore(settings.objects())
        self._pool: PoolExecutor | None = None
        self._db: Any = None
        self._db_lock = asyncio.Lock()

        self._table: dict[str, Executor] = {t: self._stage_executor(t) for t in STAGES}
        self._table["materialise_clickhouse"] = materialise_executor(self)
        self._table["publish_session"] = publish_executor(self)

    # -- Mapping ---------------------------------------------------------------------------
    def __getitem__(self, job_type: str) -> Executor:
        return self._table[job_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    # -- resources -------------------------------------------------------------------------
    def compute_pool(self) -> PoolExecutor:
        """The pool stage bodies run in (created on first use)."""
        if self._pool is None:
            if self.compute == "process":
                # spawn: a forked child would inherit the event loop's threads and locks. The
                # initializer imports every stage in each process before its first job.
                ctx = multiprocessing.get_context("spawn")
                self._pool = ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=ctx, initializer=_import_stages
                )
            else:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="stage")
        return self._pool

    async def warm_up(self) -> None:
        """Start every compute process now rather than on the first jobs (~1-2 s each).

        Each task holds its process briefly, so the pool has to start all of them; every
        process runs the initializer (imports, a Parquet round trip) before its first task.
        """
        loop = asyncio.get_running_loop()
        pool = self.compute_pool()
        await asyncio.gather(
            *(loop.run_in_executor(pool, time.sleep, 0.3) for _ in range(self.workers))
        )

    async def db(self) -> Any:
        """A small asyncpg pool for the I/O executors (created on first use)."""
        async with self._db_lock:
            if self._db is None:
                from streams.adapters import postgres

                self._db = await postgres.create_pool(
                    self.settings.postgres(), postgres.EXECUTOR_POOL
                )
        return self._db

    async def aclose(self) -> None:
        """Release the compute pool and the DB pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._db is not None:
            await self._db.close()
            self._db = None

    # -- pure stages -----------------------------------------------------------------------
    def stage_job(self, ctx: JobContext) -> StageJob:
        """The picklable body spec of ``ctx``'s job (see the module docstring)."""
        job = ctx.job
        config = {"max_artifact_bytes": self.settings.worker.max_artifact_bytes, **ctx.config}
        key = idempotency_key(
            run_id=str(job.run_id),
            job_type=job.name,
            input_hashes=ctx.input_hashes,
            config=config,
            versions=ctx.versions.as_json(),
        )
        upstream = sorted(ctx.datasets.values(), key=lambda d: -_ORDER.get(d.job, -1))
        return StageJob(
            store_root=self.settings.objects(),
            run_id=str(job.run_id),
            job_name=job.name,
            job_type=job.job_type,
            stage=STAGES[job.job_type],
            key=key,
            prefix=output_prefix(str(job.run_id), job.name, key),
            artifacts=tuple(
                InputRef(name=a.filename, url=a.storage_url, sha256=a.sha256) for a in ctx.artifacts
            ),
            inputs=tuple(
                InputRef(name=local_name(d.job, d.name), url=d.storage_url, sha256=d.content_hash)
                for d in upstream
            ),
            summaries={k: dict(v) for k, v in ctx.summaries.items()},
            config=config,
        )

    def _stage_executor(self, job_type: str) -> Executor:
        async def execute(ctx: JobContext, /) -> JobResult:
            ctx.checkpoint()
            spec = self.stage_job(ctx)
            loop = asyncio.get_running_loop()
            run = await loop.run_in_executor(self.compute_pool(), run_stage_job, spec)
            if run.failure is not None:
                _raise(run)
            assert run.outputs is not None
            return JobResult(
                summary=dict(run.outputs.summary),
                datasets=[_record(ctx.job.name, d) for d in run.outputs.datasets],
                idempotency_key=spec.key,
                metrics={
                    "reused": run.outputs.reused,
                    "timings": dict(run.timings),
                    "inputs_read": list(run.inputs_read),
                },
            )

        execute.__name__ = f"execute_{job_type}"
        return execute


def _import_stages() -> None:
    """Import every stage and round-trip a Parquet file once (first use costs ~0.2 s)."""
    import importlib

    import pyarrow as pa

    from streams.sessions.datasets import decode_parquet, encode_parquet

    for path in STAGES.values():
        importlib.import_module(path.partition(":")[0])
    decode_parquet(encode_parquet(pa.table({"x": [1.0, 2.0], "s": ["a", "b"]})))


def default_executors(settings: Settings) -> SessionExecutors:
    """Every session job type's executor for ``settings`` (process pool for the stages)."""
    return SessionExecutors(settings)
