"""The body of one pure-stage job, run whole in a worker process (or thread).

Theory of operation
-------------------
The async executor (``executors``) gathers what a job needs from Postgres - the run's
artifacts, the upstream datasets (URL + sha256), upstream summaries, config and the job's
idempotency key - into a picklable :class:`StageJob` and hands it to a pool. The body then:

1. looks for outputs already promoted under the key (a retry after a crash): if found and
   every file verifies, they are returned as they are and the stage does not run again;
2. reads the artifacts (sha256-verified) and builds a :class:`StageInput` whose ``datasets``
   mapping loads each upstream Parquet file lazily, verifying it, on first access - a stage
   reads only the inputs it uses, and a table this process already verified (or wrote) is
   reused;
3. runs the stage, then writes every output table as Parquet plus a manifest to a temporary
   directory and promotes it atomically (``datasets.write_outputs``).

Only small values cross the process boundary (the spec in, URLs, hashes and the summary out).
Errors cross it as :class:`StageFailure` values, because exceptions with keyword-only
constructor arguments do not survive pickling; the executor raises them again on its side.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.errors import unexpected
from stages.batch.contract import ArtifactBlob, StageInput, StageOutput, StageStopped
from stages.errors import StageError
from streams.errors import TidewayError, TransientError
from streams.objects import ObjectStore
from streams.sessions.datasets import JobOutputs, load_outputs, read_table, write_outputs
from streams.sessions.job_code import resolve

__all__ = ["InputRef", "LazyDatasets", "StageFailure", "StageJob", "StageRun", "run_stage_job"]


@dataclass(frozen=True, kw_only=True)
class InputRef:
    """A stored file a job reads: its stage-local name, URL and recorded sha256."""

    name: str
    url: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class StageJob:
    """Everything the body needs; picklable."""

    store_root: str
    run_id: str
    job_name: str
    job_type: str
    stage: str  # "package.module:function"
    key: str  # the idempotency key (spec 000 §8.1)
    prefix: str  # where outputs are promoted (derived from run, job and key)
    artifacts: tuple[InputRef, ...] = ()
    inputs: tuple[InputRef, ...] = ()  # nearest upstream first; the first of a name wins
    summaries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    atomic_rename: bool | None = None


@dataclass(frozen=True, kw_only=True)
class StageFailure:
    """A failure carried back across the pool as a value."""

    code: str
    message: str
    retriable: bool
    source: str = "stage"  # "stage" (the pure stage said so) or "runtime" (storage, I/O...)


@dataclass(frozen=True, kw_only=True)
class StageRun:
    """The body's result: outputs (or a failure) and where the time went."""

    outputs: JobOutputs | None = None
    failure: StageFailure | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    inputs_read: tuple[str, ...] = ()


class _VerifiedTables:
    """Tables already read and verified in this process, by content hash (an LRU by bytes).

    Datasets are immutable and named by their sha256, so a table verified once is that content
    for good: later jobs in the same worker process (``time_align.imu`` is read by five of them,
    ``fused`` by five) skip the read, the hash and the decode. Bounded by ``max_bytes``.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, sha256: str) -> pa.Table | None:
        with self._lock:
            table = self._tables.get(sha256)
            if table is not None:
                self._tables.move_to_end(sha256)
            return table

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._tables)

    def put(self, sha256: str, table: pa.Table) -> None:
        size = table.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            if sha256 in self._tables:
                return
            self._tables[sha256] = table
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._tables.popitem(last=False)
                self._bytes -= old.nbytes


VERIFIED = _VerifiedTables(max_bytes=768 * 1024 * 1024)


class LazyDatasets(Mapping[str, pa.Table]):
    """Upstream datasets by name, each read and sha256-verified on first access."""

    def __init__(self, store: ObjectStore, refs: tuple[InputRef, ...]) -> None:
        self._store = store
        self._refs: dict[str, InputRef] = {}
        for ref in refs:
            self._refs.setdefault(ref.name, ref)
        self._cache: dict[str, pa.Table] = {}
        self.read_s = 0.0
        self.cache_hits = 0

    def __getitem__(self, name: str) -> pa.Table:
        if name not in self._cache:
            ref = self._refs[name]  # KeyError for unknown names, as a Mapping should
            started = time.perf_counter()
            table = VERIFIED.get(ref.sha256)
            if table is None:
                table = read_table(self._store, ref.url, sha256=ref.sha256)
                VERIFIED.put(ref.sha256, table)
            else:
                self.cache_hits += 1
            self._cache[name] = table
            self.read_s += time.perf_counter() - started
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    def __contains__(self, name: object) -> bool:
        return name in self._refs

    @property
    def loaded(self) -> tuple[str, ...]:
        return tuple(sorted(self._cache))


def _remember(sha256: str, table: pa.Table, data: bytes) -> None:
    """Cache an output under its hash when reading the file back gives the same schema.

    Parquet keeps the values of every column type the stages use exactly; the schema (types,
    time zones, field metadata) is the part that could differ, and it is in the footer, so
    checking it costs no decode. A downstream job then gets the same table either way.
    """
    if pq.read_schema(pa.BufferReader(data)).equals(table.schema, check_metadata=True):
        VERIFIED.put(sha256, table)


def run_stage_job(job: StageJob, *, stop: Callable[[], bool] | None = None) -> StageRun:
    """Run one job's body (see the module docstring). Never raises for expected failures.

    ``stop``: asked at the stage's checkpoints (a thread-pool body; a process-pool body is
    stopped with its process instead); once true the stage raises ``StageStopped``."""
    timings: dict[str, float] = {}

    def checkpoint() -> None:
        if stop is not None and stop():
            raise StageStopped(f"{job.job_name}: stopped at a checkpoint")

    try:
        store = ObjectStore(job.store_root, atomic_rename=job.atomic_rename)
        started = time.perf_counter()
        found = load_outputs(store, job.prefix)
        timings["reuse_check_s"] = time.perf_counter() - started
        if found is not None:
            return StageRun(outputs=found, timings=timings)
        started = time.perf_counter()
        blobs = tuple(
            ArtifactBlob(
                name=a.name, data=store.read(store.key(a.url), sha256=a.sha256), sha256=a.sha256
            )
            for a in job.artifacts
        )
        timings["artifacts_s"] = time.perf_counter() - started
        datasets = LazyDatasets(store, job.inputs)
        inp = StageInput(
            artifacts=blobs,
            datasets=datasets,
            summaries=job.summaries,
            config=job.config,
            checkpoint=checkpoint,
        )
        started = time.perf_counter()
        out: StageOutput = resolve(job.stage)(inp)
        timings["stage_s"] = time.perf_counter() - started - datasets.read_s
        timings["inputs_s"] = datasets.read_s
        timings["inputs_cached"] = datasets.cache_hits
        started = time.perf_counter()
        outputs = write_outputs(
            store,
            job.prefix,
            tables=dict(out.datasets),
            summary=dict(out.summary),
            header={"run_id": job.run_id, "job": job.job_name, "idempotency_key": job.key},
            on_encoded=_remember,
        )
        timings["write_s"] = time.perf_counter() - started
        return StageRun(outputs=outputs, timings=timings, inputs_read=datasets.loaded)
    except StageError as exc:
        failure = StageFailure(code=exc.code, message=exc.message, retriable=exc.retriable)
    except TidewayError as exc:
        failure = StageFailure(
            code=exc.code,
            message=exc.message,
            retriable=isinstance(exc, TransientError),
            source="runtime",
        )
    except (OSError, MemoryError) as exc:
        failure = StageFailure(
            code="WORKER_RESOURCE", message=repr(exc), retriable=True, source="runtime"
        )
    except Exception as exc:  # a bug in a deterministic stage fails the same way every time
        # By class and place only: the text of an exception raised on a session's data may
        # quote it (a coordinate, spec 000 §15), and this message is stored with the attempt.
        failure = StageFailure(code="STAGE_CRASHED", message=unexpected(exc), retriable=False)
    return StageRun(failure=failure, timings=timings)
