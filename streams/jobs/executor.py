"""What a job type implements: an async callable from a :class:`JobContext` to a JobResult.

An executor loads its inputs through the context (artifact and upstream dataset pointers, the
summaries of upstream jobs, the run config and pinned versions), does its work, writes outputs
to a temporary location and promotes them (``streams.sessions.datasets.write_outputs``), and
returns a :class:`~streams.jobs.model.JobResult` listing the datasets and a JSON summary. The
engine records all of it in the completing transaction.

An executor that promotes outputs before returning declares where (``ctx.writes_to(url)``), so
that an attempt whose job ends without success does not leave them behind.

Long work calls ``ctx.checkpoint()`` between safe steps; it raises :class:`Cancelled` once the
run or job is cancelled (the worker learns it from a notification, or at its next heartbeat)
and the engine records the acknowledgement. CPU-bound work must not run on the event loop: wrap
a plain function with :func:`threaded`, which runs it in a thread pool (``checkpoint()`` is
thread-safe).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Executor as PoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from stages.jobs.graph import Dag
from streams.errors import TidewayError
from streams.jobs.model import ClaimedJob, JobResult, RunVersions


class Cancelled(TidewayError):
    """Raised by ``JobContext.checkpoint()`` when cancellation was requested."""

    code = "CANCELLED"


@dataclass(frozen=True, kw_only=True)
class ArtifactRef:
    """One of the run's artifacts, in upload order."""

    id: uuid.UUID
    sha256: str
    storage_url: str
    filename: str
    bytes: int
    content_type: str | None = None
    format_detected: str | None = None


@dataclass(frozen=True, kw_only=True)
class UpstreamDataset:
    """A dataset recorded by a succeeded ancestor job."""

    name: str
    job: str
    dataset_type: str
    storage_url: str
    content_hash: str
    schema_version: str
    row_count: int | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class JobContext:
    """Everything an executor may use. Built by the worker for each claimed job.

    ``datasets`` and ``summaries`` come from *ancestors* only (jobs reachable backwards over
    the DAG's edges), never from parallel branches, so the same inputs always reach a job.
    ``summaries`` is keyed by job name (the job type in the default DAG).
    """

    job: ClaimedJob
    session_id: uuid.UUID
    config: Mapping[str, Any]
    versions: RunVersions
    artifacts: tuple[ArtifactRef, ...] = ()
    datasets: Mapping[str, UpstreamDataset] = field(default_factory=dict)
    summaries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    traceparent: str | None = None
    """The run's W3C trace context (its attempts are spans of that trace), if it has one."""
    # A plain flag: set from the event loop, read from executor threads (a bool attribute
    # write is atomic under the GIL; an Event per job would cost more than a no-op job).
    _cancel: bool = field(default=False, repr=False)
    _outputs: list[str] = field(default_factory=list, repr=False)

    @property
    def input_hashes(self) -> tuple[str, ...]:
        """Content hashes of everything this job reads (for its idempotency key)."""
        hashes = [a.sha256 for a in self.artifacts]
        hashes += [d.content_hash for d in self.datasets.values()]
        return tuple(sorted(hashes))

    @property
    def cancel_requested(self) -> bool:
        """Whether the worker has learnt that this job should stop."""
        return self._cancel

    def request_cancel(self) -> None:
        """Mark the job as to be cancelled (called by the worker; thread-safe)."""
        self._cancel = True

    def writes_to(self, url: str) -> None:
        """Declare, before writing them, that this attempt promotes outputs under ``url`` (an
        object-store directory of this job's own, in this run). If the job then ends without
        success (cancelled, or failed for good) nothing will ever record them, and the worker
        removes them (``streams.jobs.unrecorded``)."""
        self._outputs.append(url)

    @property
    def output_dirs(self) -> tuple[str, ...]:
        """Where this attempt declared it promotes outputs (:meth:`writes_to`)."""
        return tuple(self._outputs)

    def checkpoint(self) -> None:
        """Raise :class:`Cancelled` if cancellation was requested; call between safe steps."""
        if self._cancel:
            raise Cancelled(f"job {self.job.name} ({self.job.id}) was cancelled")


class Executor(Protocol):
    """The interface of a job type's implementation."""

    async def __call__(self, ctx: JobContext, /) -> JobResult: ...


def threaded(
    fn: Callable[[JobContext], JobResult], *, pool: PoolExecutor | None = None
) -> Executor:
    """An executor running the blocking ``fn`` in ``pool`` (default: the loop's thread pool)."""

    async def run(ctx: JobContext, /) -> JobResult:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, ctx)

    return run


async def placeholder(ctx: JobContext, /) -> JobResult:
    """Stand-in for a job type not wired yet: passes its inputs through, writes nothing."""
    ctx.checkpoint()
    return JobResult(
        summary={
            "placeholder": True,
            "job_type": ctx.job.job_type,
            "inputs": sorted(ctx.datasets),
            "upstream": sorted(ctx.summaries),
        }
    )


async def noop(ctx: JobContext, /) -> JobResult:
    """Does nothing (benchmarks)."""
    return JobResult()


def placeholder_executors(dag: Dag) -> dict[str, Executor]:
    """A placeholder executor for every job type of ``dag``."""
    return {spec.job_type: placeholder for spec in dag.values()}
