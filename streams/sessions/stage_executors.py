"""One executor per job type of the session DAG, wiring the pure stages into the job engine.

Theory of operation
-------------------
The table is derived from the :class:`~stages.jobs.dag.JobSpec` entries of the DAG it is given
(the top-level wiring passes the standard one): a spec with a ``stage`` gets the pure-stage
executor below, one with an ``executor`` gets what that factory builds from this table's
resources (``materialise_clickhouse``, ``publish_session``; the DAG is one of them), both
references resolved by ``streams.sessions.job_code``, so adding a job type is one DAG entry and
this module imports neither of those executors.

For the pure-stage job types the executor turns the engine's :class:`JobContext`
into a picklable :class:`~streams.sessions.stage_job.StageJob` and runs its body in a compute
pool - a process pool by default, so CPU-heavy stages run in parallel and never on the event
loop (``compute="thread"`` keeps them in threads, which tests use for speed).

- **Lanes** (issue 30): the process pool is ``workers`` one-process pools, and a body goes to
  the idle process that already holds the most of its inputs (when none is idle it waits for
  the first that is, as in one shared pool). Each process keeps the tables
  and artifacts it verified or wrote (``stage_job.VERIFIED``), so the next job of a chain -
  ``parse_raw`` -> ``normalise_units`` -> ``time_align`` -> ``fuse_gnss_imu`` -> ... - reads
  its inputs from memory instead of reading, hashing and decoding them again (0.1-0.2 s a job
  for a 60-minute session's ``imu`` or ``fused``, bench/session.py); one shared pool handed
  each body to whichever process took it first. The table remembers, per process, the content
  hashes (and sizes) its bodies reported holding, bounded like the process's own cache; it is
  a hint only: a miss reads and verifies the file as before. A process stopped with its job
  (or lost) is replaced by its pool, and its lane forgets what it held.

- **Stopping** (cancellation, soft timeout, drain): the worker cancels the executor's task.
  In the process pool (pebble's, chosen because it can stop one task's process without
  breaking the pool) that terminates the process computing the stage - its CPU work ends
  within moments and the pool starts a fresh process in its place, so a retry never runs
  next to a stale attempt. A pool process also dies with its worker, should the worker be
  killed outright (``streams.sessions.pool_process``). In the thread pool the stage is told
  through its ``checkpoint`` callback, which the long stages call inside their loops. The
  executor declares the job's output directory before the body runs (``ctx.writes_to``), so an
  attempt whose job ends cancelled or failed leaves nothing behind. The body reads
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
import importlib
import multiprocessing
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Literal

import pebble

from stages.batch import canonical
from stages.errors import StageError
from stages.jobs.graph import Dag, topological_order
from streams.config import Settings
from streams.errors import PermanentError, TransientError
from streams.jobs.executor import Executor, JobContext
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore
from streams.sessions import artifact_lifecycle
from streams.sessions.datasets import DatasetFile, idempotency_key, output_prefix
from streams.sessions.job_code import resolve
from streams.sessions.pool_process import die_with_parent
from streams.sessions.resume import Lineages, resume_job
from streams.sessions.stage_job import VERIFIED, InputRef, StageJob, StageRun, run_stage_job

__all__ = ["SessionExecutors", "default_executors", "local_name", "record_name"]

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
    """The executors of every job type of ``dag``, sharing one compute pool and one DB pool.

    Pools are created on first use and released by :meth:`aclose` (or at interpreter exit).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        dag: Dag,
        compute: Compute = "process",
        workers: int | None = None,
    ) -> None:
        self.settings = settings
        self.dag = dag
        self._order = {name: i for i, name in enumerate(topological_order(dag))}
        self.compute = compute
        self.workers = workers or max(1, settings.worker.concurrency)
        self.store = ObjectStore(settings.objects())
        self._lanes: list[_Lane] | None = None
        self._lane_freed: asyncio.Event | None = None
        self._asks: list[_Ask] = []
        self._rank = _ranks(dag)
        self._threads: ThreadPoolExecutor | None = None
        self._db: Any = None
        self._db_lock = asyncio.Lock()
        self.lineages = Lineages()

        self._table: dict[str, Executor] = {}
        for spec in dag.values():
            if spec.stage:
                self._table[spec.job_type] = self._stage_executor(spec.job_type)
            elif spec.executor:
                self._table[spec.job_type] = resolve(spec.executor)(self)

    # -- Mapping ---------------------------------------------------------------------------
    def __getitem__(self, job_type: str) -> Executor:
        return self._table[job_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    # -- resources -------------------------------------------------------------------------
    def _process_lanes(self) -> list[_Lane]:
        """The compute processes stage bodies run in, one pool each (created on first use)."""
        if self._lanes is None:
            # spawn: a forked child would inherit the event loop's threads and locks. The
            # initializer ties each process's life to this one's (a killed worker must not
            # leave a stage computing: streams.sessions.pool_process) and imports every stage
            # before its first job (and in each process started in place of one stopped with
            # its job).
            self._lanes = [
                _Lane(
                    pebble.ProcessPool(
                        max_workers=1,
                        initializer=_start_process,
                        initargs=(os.getpid(), tuple(self.dag.stages.values())),
                        context=multiprocessing.get_context("spawn"),
                    )
                )
                for _ in range(self.workers)
            ]
        return self._lanes

    async def _take_lane(self, spec: StageJob) -> _Lane:
        """An idle lane for ``spec``, once there is one: the one holding the most of its inputs
        (the first of equals). Waiting here rather than queueing behind one lane's body keeps
        the pool's behaviour: a body starts in the first process that is free.

        Jobs claimed together (two branches leaving one job: ``fuse_gnss_imu`` and
        ``downsample_L0`` after ``time_align``) all ask before any lane is given, and the one
        with the longest way to the end of the DAG (then the heavy one) chooses first, so the
        critical path keeps the process holding the inputs both want."""
        lanes = self._process_lanes()
        ask = _Ask(rank=self._rank.get(spec.job_type, (0, False)),
                   wanted=spec.artifacts + _effective(spec.inputs))  # fmt: skip
        self._asks.append(ask)
        try:
            await asyncio.sleep(0)  # the jobs started with this one ask now too
            while True:
                self._assign(lanes)
                if ask.lane is not None:
                    return ask.lane
                if self._lane_freed is None:
                    self._lane_freed = asyncio.Event()
                self._lane_freed.clear()
                await self._lane_freed.wait()
        except BaseException:
            if ask in self._asks:
                self._asks.remove(ask)
            if ask.lane is not None:  # given, but this job is gone
                self._release(ask.lane)
            raise

    def _assign(self, lanes: list[_Lane]) -> None:
        """Give the idle lanes to the waiting asks, the highest ranked first."""
        idle = [lane for lane in lanes if not lane.busy]
        for ask in sorted(self._asks, key=lambda a: a.rank, reverse=True):
            if not idle:
                return
            lane = max(idle, key=lambda lane: lane.holds(ask.wanted))  # the first of equals
            idle.remove(lane)
            lane.busy = True
            ask.lane = lane
            self._asks.remove(ask)

    def _release(self, lane: _Lane) -> None:
        lane.busy = False
        if self._lane_freed is not None:
            self._lane_freed.set()

    def thread_pool(self) -> ThreadPoolExecutor:
        """The thread pool stage bodies run in with ``compute="thread"``."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="stage")
        return self._threads

    async def run_body(self, spec: StageJob) -> StageRun:
        """Run one stage body in the compute pool; cancelling the caller stops the body.

        A process-pool body is stopped by stopping its process (pebble terminates it and starts
        another); a thread-pool body sees its ``checkpoint`` raise at the stage's next one.
        """
        if self.compute == "process":
            lane = await self._take_lane(spec)
            try:
                future = lane.pool.schedule(run_stage_job, args=(spec,))
                try:
                    run: StageRun = await asyncio.wrap_future(future)
                except BaseException:  # stopped with its job, or lost: a new process replaces it
                    future.cancel()  # type: ignore[no-untyped-call]  # (wrap_future does too)
                    lane.forget()
                    raise
            finally:
                self._release(lane)
            lane.remember(run.held)
            return run
        stop = threading.Event()
        body = partial(run_stage_job, spec, stop=stop.is_set)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.thread_pool(), body)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def warm_up(self) -> None:
        """Start every compute process now rather than on the first jobs (~1-2 s each).

        Each task holds its process briefly, so the pool has to start all of them; every
        process runs the initializer (imports, a Parquet round trip) before its first task,
        and the task runs each stage module's own ``warm_up()`` (fusion loads its compiled
        loops). With ``compute="thread"`` the stages warm up in this process.
        """
        stages = tuple(self.dag.stages.values())
        if self.compute != "process":
            await asyncio.to_thread(_warm_stages, stages, 0.0)
            return
        await asyncio.gather(
            *(asyncio.wrap_future(lane.pool.schedule(_warm_stages, args=(stages, 0.3)))
              for lane in self._process_lanes())
        )  # fmt: skip

    async def db(self) -> Any:
        """A small asyncpg pool for the I/O executors (created on first use)."""
        async with self._db_lock:
            if self._db is None:
                from streams.adapters import postgres

                self._db = await postgres.create_pool(
                    self.settings.postgres(),
                    postgres.batch_pool(postgres.EXECUTOR_POOL, self.settings.postgres_timeouts),
                )
        return self._db

    async def aclose(self) -> None:
        """Release the compute pools and the DB pool."""
        if self._lanes is not None:
            for lane in self._lanes:
                lane.pool.stop()  # type: ignore[no-untyped-call]  # stops a running body
            for lane in self._lanes:
                await asyncio.to_thread(lane.pool.join)
            self._lanes = None
        if self._threads is not None:
            self._threads.shutdown(wait=True, cancel_futures=True)
            self._threads = None
        if self._db is not None:
            await self._db.close()
            self._db = None

    # -- pure stages -----------------------------------------------------------------------
    def stage_job(self, ctx: JobContext, *, lineage: uuid.UUID | None = None) -> StageJob:
        """The picklable body spec of ``ctx``'s job (see the module docstring).

        ``lineage``: the first run of the retry chain ``ctx``'s run belongs to, which the key
        names instead of the run (``streams.sessions.resume``); default: the run itself."""
        job = ctx.job
        config = {"max_artifact_bytes": self.settings.worker.max_artifact_bytes, **ctx.config}
        key = idempotency_key(
            run_id=str(lineage or job.run_id),
            job_type=job.name,
            input_hashes=ctx.input_hashes,
            config=config,
            versions=ctx.versions.as_json(),
        )
        upstream = sorted(ctx.datasets.values(), key=lambda d: -self._order.get(d.job, -1))
        return StageJob(
            store_root=self.settings.objects(),
            run_id=str(job.run_id),
            job_name=job.name,
            job_type=job.job_type,
            stage=self.dag.stages[job.job_type],
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

    async def _record_artifacts(self, ctx: JobContext, run: StageRun) -> None:
        """The intake stages' verdicts onto the artifact rows (``artifact_lifecycle``)."""
        job_type, failure = ctx.job.job_type, run.failure
        if job_type == "artifact_validate":
            if failure is None:
                await artifact_lifecycle.record_validation(
                    await self.db(), ctx.artifacts, passed=True
                )
            elif failure.source == "stage" and not failure.retriable:
                await artifact_lifecycle.record_validation(
                    await self.db(), ctx.artifacts, passed=False, message=failure.message
                )
        elif job_type == "artifact_classify" and run.outputs is not None:
            await artifact_lifecycle.record_classification(
                await self.db(), ctx.artifacts, run.outputs.summary
            )

    def _stage_executor(self, job_type: str) -> Executor:
        async def execute(ctx: JobContext, /) -> JobResult:
            ctx.checkpoint()
            db = await self.db()
            lineage = await self.lineages.of(db, ctx.job.run_id)
            spec = self.stage_job(ctx, lineage=lineage[-1])
            resumed = await resume_job(
                db, self.store, earlier_runs=lineage[1:], job_name=ctx.job.name, key=spec.key
            )
            if resumed is not None:
                return resumed
            # Declared before the body promotes anything there: removed if the job then ends
            # without success (streams.jobs.unrecorded). Resumed outputs, another run's, are not.
            ctx.writes_to(self.store.url(spec.prefix))
            run = await self.run_body(spec)
            await self._record_artifacts(ctx, run)
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


class _Lane:
    """One compute process (a one-process pool), its running bodies and what it holds: the
    content hashes and sizes of the tables and artifacts its bodies reported in its cache,
    least recently used first, bounded like that cache (``stage_job.VERIFIED``)."""

    def __init__(self, pool: pebble.ProcessPool) -> None:
        self.pool = pool
        self.busy = False
        self._held: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0

    def holds(self, refs: Iterable[InputRef]) -> int:
        """Bytes of ``refs`` this process holds."""
        return sum(self._held.get(ref.sha256, 0) for ref in refs)

    def remember(self, held: Mapping[str, int]) -> None:
        for sha256, size in held.items():
            self._bytes += size - self._held.pop(sha256, 0)
            self._held[sha256] = size
        while self._bytes > VERIFIED.max_bytes and self._held:
            self._bytes -= self._held.popitem(last=False)[1]

    def forget(self) -> None:
        self._held.clear()
        self._bytes = 0


@dataclass(kw_only=True)
class _Ask:
    """A body waiting for a lane."""

    rank: tuple[int, bool]
    wanted: tuple[InputRef, ...]
    lane: _Lane | None = None


def _ranks(dag: Dag) -> dict[str, tuple[int, bool]]:
    """Per job type: the most jobs on a way from it to the end of ``dag`` (itself included),
    and whether it is heavy - the order in which jobs claimed together choose their lane."""
    children: dict[str, list[str]] = {name: [] for name in dag}
    for name, spec in dag.items():
        for dep in spec.deps:
            children[dep.on].append(name)
    depth: dict[str, int] = {}
    for name in reversed(topological_order(dag)):
        depth[name] = 1 + max((depth[c] for c in children[name]), default=0)
    return {spec.job_type: (depth[name], spec.heavy) for name, spec in dag.items()}


def _effective(refs: tuple[InputRef, ...]) -> tuple[InputRef, ...]:
    """The inputs a stage can see: the first of each name (``stage_job.LazyDatasets``)."""
    seen: set[str] = set()
    out = []
    for ref in refs:
        if ref.name not in seen:
            seen.add(ref.name)
            out.append(ref)
    return tuple(out)


def _start_process(worker_pid: int, stages: tuple[str, ...]) -> None:
    """The pool's initializer: die with the worker, then import the stages."""
    die_with_parent(worker_pid)
    _import_stages(stages)


def _import_stages(stages: tuple[str, ...]) -> None:
    """Import every stage and round-trip a Parquet file once (first use costs ~0.2 s)."""
    import pyarrow as pa

    from streams.sessions.datasets import decode_parquet, encode_parquet

    for path in stages:
        resolve(path)
    decode_parquet(encode_parquet(pa.table({"x": [1.0, 2.0], "s": ["a", "b"]})))


def _warm_stages(stages: tuple[str, ...], hold_s: float) -> None:
    """Call every stage module's ``warm_up()``, if it has one, then hold the process at least
    ``hold_s`` (so a pool's tasks land on all of its processes)."""
    started = time.monotonic()
    for module in dict.fromkeys(path.partition(":")[0] for path in stages):
        warm = getattr(importlib.import_module(module), "warm_up", None)
        if callable(warm):
            warm()
    time.sleep(max(0.0, hold_s - (time.monotonic() - started)))


def default_executors(settings: Settings, dag: Dag) -> SessionExecutors:
    """Every job type's executor of ``dag`` for ``settings`` (process pool for the stages)."""
    return SessionExecutors(settings, dag=dag)
