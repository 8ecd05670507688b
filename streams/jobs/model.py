"""Value objects that cross the queue API: claimed jobs, results, datasets, versions.

Rows become objects here and only here (``ClaimedJob.from_row``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from stages.jobs.job_state import JobState


class Row(Protocol):
    """A database row (asyncpg ``Record``) or any mapping with the same keys."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class RunVersions:
    """The versions a run pins (spec 000 §6.2)."""

    parser: str
    pipeline: str
    fusion: str | None = None

    def as_json(self) -> dict[str, str | None]:
        return {"parser": self.parser, "pipeline": self.pipeline, "fusion": self.fusion}


@dataclass(frozen=True, kw_only=True)
class ClaimedJob:
    """A job a worker holds: identity, attempt number and the limits it runs under."""

    id: uuid.UUID
    run_id: uuid.UUID
    tenant_id: uuid.UUID
    name: str
    job_type: str
    pool: str
    critical: bool
    heavy: bool
    priority: int
    attempt: int
    max_attempts: int
    soft_timeout_s: float
    hard_timeout_s: float
    locked_by: str
    locked_at: datetime
    payload: Mapping[str, Any] = field(default_factory=dict)
    lost: int = 0
    """Earlier attempts lost to their worker (not counted against ``max_attempts``)."""

    @property
    def own_attempt(self) -> int:
        """This attempt's number among the job's own (lost attempts left out), 1-based."""
        return self.attempt - self.lost

    @classmethod
    def from_row(cls, row: Row) -> ClaimedJob:
        """Build from a ``jobs`` row returned by the claim statement."""
        return cls(
            id=row["id"],
            run_id=row["run_id"],
            tenant_id=row["tenant_id"],
            name=row["name"],
            job_type=row["job_type"],
            pool=row["pool"],
            critical=row["critical"],
            heavy=row["heavy"],
            priority=row["priority"],
            attempt=row["attempt_count"],
            max_attempts=row["max_attempts"],
            soft_timeout_s=row["soft_timeout_s"],
            hard_timeout_s=row["hard_timeout_s"],
            locked_by=row["locked_by"],
            locked_at=row["locked_at"],
            payload=row["payload"] or {},
            lost=row["lost_count"],
        )


@dataclass(frozen=True, kw_only=True)
class DatasetRecord:
    """One output of a job, promoted to ``storage_url`` and recorded on completion.

    ``name`` is unique within the run (``gnss``, ``gnss_L1``, ``laps``...); ``content_hash`` is
    the sha256 of the stored bytes; ``stats`` is free JSON (row counts, rates, quality flags).
    """

    name: str
    storage_url: str
    content_hash: str
    schema_version: str
    dataset_type: str = ""
    row_count: int | None = None
    bytes: int | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    time_range_start: datetime | None = None
    time_range_end: datetime | None = None

    def as_json(self, job_id: uuid.UUID) -> dict[str, Any]:
        return {
            "job_id": str(job_id),
            "name": self.name,
            "dataset_type": self.dataset_type or self.name,
            "storage_url": self.storage_url,
            "content_hash": self.content_hash,
            "schema_version": self.schema_version,
            "row_count": self.row_count,
            "bytes": self.bytes,
            "stats": dict(self.stats),
            "time_range_start": _iso(self.time_range_start),
            "time_range_end": _iso(self.time_range_end),
        }


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """What an executor returns on success.

    ``summary`` is JSON stored as the job's output and handed to downstream jobs; a
    ``summary["capabilities"]`` mapping (``{"imu": false}``) triggers gating of later jobs.
    ``idempotency_key`` (spec 000 §8.1) is stored on the job when given. ``metrics`` lands in
    the attempt's ``metrics`` JSON next to the measured duration.
    """

    summary: Mapping[str, Any] = field(default_factory=dict)
    datasets: Sequence[DatasetRecord] = ()
    idempotency_key: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)


class Outcome(StrEnum):
    """What a state-changing call did to the job it was given."""

    APPLIED = "applied"  # the transition happened
    CANCEL_REQUESTED = "cancel_requested"  # refused: cancellation was requested; acknowledge it
    LOST = "lost"  # refused: the job is no longer this worker's attempt (reaped, cancelled...)


@dataclass(frozen=True, kw_only=True, slots=True)
class FinishedRun:
    """A run that reached its final status in the transaction that returned it."""

    run_id: uuid.UUID
    status: str
    upload_to_publish_s: float | None = None
    """Seconds from its files' upload to the run publishing; set only for a run that
    published (succeeded or partial) and was created for an upload (not a reprocess or a
    retry)."""


@dataclass(frozen=True, kw_only=True)
class FailOutcome:
    """Result of ``fail``: the outcome and, when applied, the job's new state."""

    outcome: Outcome
    state: JobState | None = None
    next_run_at: datetime | None = None
    finished_runs: tuple[FinishedRun, ...] = ()
    """Runs this attempt's end finalised (its last open job)."""


@dataclass(frozen=True, kw_only=True)
class Completed:
    """Result of ``complete_batch``: each job's outcome and the runs the batch finalised."""

    outcomes: Mapping[uuid.UUID, Outcome]
    finished_runs: tuple[FinishedRun, ...] = ()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
