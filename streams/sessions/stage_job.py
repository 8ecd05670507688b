"""The body of one pure-stage job, run whole in a worker process (or thread).

Theory of operation
-------------------
The async executor (``executors``) gathers what a job needs from Postgres - the run's
artifacts, the upstream datasets (URL + sha256), upstream summaries, config and the job's
idempotency key - into a picklable :class:`StageJob` and hands it to a pool. The body then:

1. looks for outputs already promoted under the key (a retry after a crash): if found and
   every file verifies, they are returned as they are and the stage does not run again;
2. builds a :class:`StageInput` whose ``artifacts`` and ``datasets`` load each stored file
   lazily, verifying its sha256, on first access - a stage reads only the inputs it uses (the
   three intake stages read the artifact, the other eleven never touch it), and an artifact
   or table this process already verified (or wrote) is reused;
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.errors import unexpected
from stages.batch.contract import ArtifactBlob, StageInput, StageOutput, StageStopped
from stages.errors import StageError
from streams.errors import TidewayError, TransientError
from streams.objects import ObjectStore
from streams.sessions.datasets import JobOutputs, load_outputs, read_table, write_outputs
from streams.sessions.job_code import resolve

__all__ = [
    "InputRef",
    "LazyArtifacts",
    "LazyDatasets",
    "StageFailure",
    "StageJob",
    "StageRun",
    "run_stage_job",
]


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
    held: Mapping[str, int] = field(default_factory=dict)
    """Content hash -> size of what this process now holds in its cache (``VERIFIED``) of the
    job's inputs and outputs: where the executor sends the next job that reads them."""


class _VerifiedTables:
    """Tables and artifacts already read and verified in this process, by content hash (an LRU
    by bytes).

    Datasets are immutable and named by their sha256, so a table verified once is that content
    for good: later jobs in the same worker process (``time_align.imu`` is read by five of them,
    ``fused`` by five) skip the read, the hash and the decode. Artifacts likewise: they are
    content-addressed and never rewritten, and the three intake jobs all read the upload (a
    60-minute CSV is 62 MB: reading and hashing it cost 0.09-0.13 s a job, bench/session.py).
    The guarantee of the sha256 check is kept: what a job computes from is exactly the content
    recorded for it, because the bytes held here are the bytes that hashed to that digest when
    they were read (immutable ``bytes``; a table decoded from them or written as them), never
    re-read from a store that could have changed since. Bounded by ``max_bytes``.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[str, pa.Table | bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def _size(value: pa.Table | bytes) -> int:
        return len(value) if isinstance(value, bytes) else int(value.nbytes)

    def _get(self, key: str) -> pa.Table | bytes | None:
        with self._lock:
            value = self._tables.get(key)
            if value is not None:
                self._tables.move_to_end(key)
            return value

    def _put(self, key: str, value: pa.Table | bytes) -> None:
        size = self._size(value)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._tables:
                return
            self._tables[key] = value
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._tables.popitem(last=False)
                self._bytes -= self._size(old)

    def get(self, sha256: str) -> pa.Table | None:
        value = self._get(sha256)
        return value if isinstance(value, pa.Table) else None

    def put(self, sha256: str, table: pa.Table) -> None:
        self._put(sha256, table)

    def get_blob(self, sha256: str) -> bytes | None:
        """The verified bytes of the artifact hashing to ``sha256``, if this process has them."""
        value = self._get(f"blob:{sha256}")
        return value if isinstance(value, bytes) else None

    def put_blob(self, sha256: str, data: bytes) -> None:
        """Remember ``data``, verified to hash to ``sha256``."""
        self._put(f"blob:{sha256}", data)

    def sizes(self, hashes: Iterable[str]) -> dict[str, int]:
        """Size of each of ``hashes`` (tables and artifacts) held here; the others are left out."""
        with self._lock:
            found = {}
            for sha256 in hashes:
                for key in (sha256, f"blob:{sha256}"):
                    value = self._tables.get(key)
                    if value is not None:
                        found[sha256] = self._size(value)
            return found

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._tables)


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


class LazyArtifacts(Sequence[ArtifactBlob]):
    """The run's artifacts in upload order, each read and sha256-verified on first access.

    Its length costs nothing (``if not inp.artifacts``); only a stage that looks at an
    artifact's bytes reads it, and an artifact this process verified before is not read again.
    """

    def __init__(self, store: ObjectStore, refs: tuple[InputRef, ...]) -> None:
        self._store = store
        self._refs = refs
        self._blobs: dict[int, ArtifactBlob] = {}
        self.read_s = 0.0

    def _blob(self, i: int) -> ArtifactBlob:
        if i not in self._blobs:
            ref = self._refs[i]
            started = time.perf_counter()
            data = VERIFIED.get_blob(ref.sha256)
            if data is None:
                data = self._store.read(self._store.key(ref.url), sha256=ref.sha256)
                VERIFIED.put_blob(ref.sha256, data)
            self._blobs[i] = ArtifactBlob(name=ref.name, data=data, sha256=ref.sha256)
            self.read_s += time.perf_counter() - started
        return self._blobs[i]

    @overload
    def __getitem__(self, i: int) -> ArtifactBlob: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[ArtifactBlob, ...]: ...

    def __getitem__(self, i: int | slice) -> ArtifactBlob | tuple[ArtifactBlob, ...]:
        indices = range(len(self._refs))
        if isinstance(i, slice):
            return tuple(self._blob(j) for j in indices[i])
        return self._blob(indices[i])  # IndexError and negative indices as a tuple's

    def __len__(self) -> int:
        return len(self._refs)


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
        artifacts = LazyArtifacts(store, job.artifacts)
        datasets = LazyDatasets(store, job.inputs)
        inp = StageInput(
            artifacts=artifacts,
            datasets=datasets,
            summaries=job.summaries,
            config=job.config,
            checkpoint=checkpoint,
        )
        started = time.perf_counter()
        out: StageOutput = resolve(job.stage)(inp)
        timings["stage_s"] = time.perf_counter() - started - datasets.read_s - artifacts.read_s
        timings["artifacts_s"] = artifacts.read_s
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
        return StageRun(
            outputs=outputs,
            timings=timings,
            inputs_read=datasets.loaded,
            held=VERIFIED.sizes(
                [r.sha256 for r in job.artifacts]
                + [r.sha256 for r in job.inputs]
                + [d.sha256 for d in outputs.datasets]
            ),
        )
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
