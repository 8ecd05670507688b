"""Processing runs: lists, a run with its jobs and datasets, its DAG, cancel and retry."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from schemas.api.base import Page, _Body, _Query

RunStatus = Literal[
    "pending", "running", "cancel_requested", "succeeded", "partial", "failed", "cancelled"
]


class RunQuery(_Query):
    session: uuid.UUID | None = Field(None, description="Only this session's runs.")
    status: RunStatus | None = None


class RunSummary(_Body):
    id: uuid.UUID
    tenant: str = Field(exclude=True)  # operator-only (the CLI lists every tenant's runs)
    session_id: uuid.UUID
    status: str
    priority: int
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    jobs_total: int
    jobs_open: int
    failure_reason: str | None
    retry_of: uuid.UUID | None


class RunPage(Page[RunSummary]):
    """The caller's runs, newest first."""


class RunJob(_Body):
    name: str
    job_type: str
    state: str
    critical: bool
    pool: str
    attempt_count: int
    max_attempts: int
    skip_reason: str | None
    last_error_code: str | None
    last_error_message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDataset(_Body):
    name: str
    dataset_type: str
    job: str
    storage_url: str
    content_hash: str | None
    schema_version: str | None
    row_count: int | None
    bytes: int | None
    time_range_start: datetime | None
    time_range_end: datetime | None


class Run(_Body):
    id: uuid.UUID
    session_id: uuid.UUID
    status: str
    artifact_set_hash: str
    requested_by: str
    parser_version: str | None
    pipeline_version: str | None
    fusion_version: str | None
    config: dict[str, Any]
    priority: int
    jobs_total: int
    jobs_open: int
    gating: list[dict[str, Any]]
    features_available: dict[str, bool]
    feature_reasons: dict[str, str]
    summary: dict[str, Any]
    failure_reason: str | None
    retry_of: uuid.UUID | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    active: bool = Field(description="Whether the session's active pointer is this run.")
    jobs: list[RunJob]
    datasets: list[RunDataset]


class DagEdge(_Body):
    on: str = Field(description="The job depended on.")
    hard: bool = Field(description="False: a soft dependency (its failure does not block).")


class DagAttempt(_Body):
    number: int
    status: str
    worker: str
    started_at: datetime | None
    ended_at: datetime | None
    duration_s: float | None
    error_code: str | None
    error_type: str | None
    error_source: str | None
    severity: int | None
    message: str | None


class DagJob(_Body):
    id: uuid.UUID = Field(exclude=True)  # operator-only
    name: str
    job_type: str
    state: str
    critical: bool
    pool: str
    heavy: bool = Field(exclude=True)  # operator-only
    deps: list[DagEdge]
    attempt_count: int
    max_attempts: int
    locked_by: str | None = Field(exclude=True)  # operator-only: the worker holding it
    created_at: datetime = Field(description="When the run planned the job.")
    queued_at: datetime | None = Field(
        description="When it could first start: its creation, or the end of the last of its"
        " dependencies. Null while one is still open, for a skipped job, and for one cancelled"
        " before then. Its first attempt's ``started_at`` minus this is how long it waited for"
        " a worker."
    )
    next_run_at: datetime | None
    started_at: datetime | None = Field(description="Its first attempt's start.")
    finished_at: datetime | None
    busy_s: float = Field(description="Seconds spent in attempts so far.")
    skip_reason: str | None
    last_error_code: str | None
    last_error_message: str | None
    datasets: list[str]
    attempts: list[DagAttempt]


class RunDag(_Body):
    """A run's DAG (``tideway runs show``): jobs in dependency order, with their attempts."""

    # The operator-only fields are what ``tideway runs show`` draws around the DAG; the API
    # answers the run's own record at ``GET /v1/runs/{id}`` (:class:`Run`) instead.

    run_id: uuid.UUID
    status: str
    run: RunSummary = Field(exclude=True)  # operator-only, as the rest of this block
    config: dict[str, Any] = Field(exclude=True)
    versions: dict[str, str | None] = Field(exclude=True)
    artifacts: list[dict[str, Any]] = Field(exclude=True)
    gating: list[dict[str, Any]] = Field(description="Why jobs were skipped by gating.")
    features_available: dict[str, bool] = Field(exclude=True)
    feature_reasons: dict[str, str] = Field(exclude=True)
    summary: dict[str, Any] = Field(exclude=True)
    jobs: list[DagJob]


class CancelResult(_Body):
    run_id: uuid.UUID
    status: str
    cancelled: int = Field(description="Jobs not yet started, now cancelled.")
    requested: int = Field(description="Running jobs asked to stop at their next checkpoint.")


class RunStarted(_Body):
    """A run a retry or reprocess started (``created`` false: an identical one existed)."""

    run_id: uuid.UUID
    created: bool


class BackfillSchedule(_Body):
    """A backfill the workers run by the clock (``tideway runs schedule``)."""

    id: uuid.UUID = Field(exclude=True)  # operator-only, as tenant
    tenant: str = Field(exclude=True)
    name: str
    cron: str = Field(description="When, in UTC (a cron expression).")
    device: str | None = Field(description="Only this device's sessions (null: every device).")
    uploaded_within_s: float | None = Field(
        description="Only sessions uploaded this long before each tick (null: every session).")
    priority: int
    enabled: bool
    created_by: str
    created_at: datetime
    next_run_at: datetime
    last_run_at: datetime | None
    last_outcome: dict[str, int] | None = Field(
        description="Sessions per action of the last tick (`started`, `current`, `no_run`).")
    last_error: str | None


class BackfillSchedules(Page[BackfillSchedule]):
    """The caller's scheduled backfills, by name (one page: a tenant has a handful)."""
