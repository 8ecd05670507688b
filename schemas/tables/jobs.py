"""The batch half: artifacts, sessions, processing runs, jobs, attempts and derived datasets.

A *session* (one recorded outing of a device) has one or more *artifacts* (uploaded files) and
any number of *processing runs*; ``sessions.active_run_id`` points at the run the UI reads
(moved only when a newer run ends succeeded or partial). A run pins its versions and config
and owns a DAG of *jobs* (``job_edges``: ``job_id`` waits for ``depends_on_id``; a *hard* edge
needs the dependency to succeed, a *soft* edge only needs it to finish). Every execution try of
a job leaves one ``job_attempts`` row (spec 004's step history with its error taxonomy), and
each output is one immutable ``derived_datasets`` row.

The state columns carry CHECK constraints listing their states; the transitions between them
are guarded by triggers created in migration ``0003_jobs`` from the same tables as
``stages.jobs.job_state`` and ``stages.jobs.run_state`` (a test walks every pair against both).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from schemas.tables.base import created_at, metadata, tenant_fk, updated_at, uuid_pk

JOB_STATES = (
    "created",
    "queued",
    "running",
    "succeeded",
    "failed",
    "retry_wait",
    "cancel_requested",
    "cancelled",
    "skipped",
)
RUN_STATES = ("pending", "running", "partial", "failed", "succeeded", "cancelled")
ATTEMPT_STATES = ("running", "succeeded", "failed", "timed_out", "cancelled")
ARTIFACT_STATES = ("uploaded", "validated", "rejected", "deleted")
SESSION_STATES = ("pending", "ready", "failed")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _uuid_fk(
    column: str, target: str, *, ondelete: str, nullable: bool = False, **fk: Any
) -> sa.Column[Any]:
    key = sa.ForeignKey(target, ondelete=ondelete, **fk)
    return sa.Column(column, pg.UUID(as_uuid=True), key, nullable=nullable)


def _jsonb(name: str, default: str = "{}", *, nullable: bool = False) -> sa.Column[Any]:
    default_sql = sa.text(f"'{default}'::jsonb")
    return sa.Column(name, pg.JSONB, nullable=nullable, server_default=default_sql)


def _ts(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True))


sessions = sa.Table(
    "sessions",
    metadata,
    uuid_pk(),
    tenant_fk(),
    _uuid_fk("device_id", "devices.id", ondelete="RESTRICT"),
    # The run the UI reads. ``use_alter``: runs and sessions reference each other.
    _uuid_fk(
        "active_run_id",
        "processing_runs.id",
        ondelete="SET NULL",
        nullable=True,
        use_alter=True,
        name="fk_sessions_active_run_id_processing_runs",
    ),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("query_ready", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("title", sa.Text),
    _jsonb("metadata"),
    created_at(),
    updated_at(),
    sa.Index("ix_sessions_device_id", "device_id"),
    sa.CheckConstraint(_in("status", SESSION_STATES), name="status_known"),
)

artifacts = sa.Table(
    "artifacts",
    metadata,
    uuid_pk(),
    tenant_fk(),
    _uuid_fk("session_id", "sessions.id", ondelete="RESTRICT", nullable=True),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("filename", sa.Text, nullable=False),
    sa.Column("content_type", sa.Text),
    sa.Column("storage_url", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="uploaded"),
    sa.Column("format_detected", sa.Text),
    sa.Column("uploaded_by", sa.Text),
    _jsonb("metadata"),
    created_at(),
    sa.UniqueConstraint("tenant_id", "sha256", name="uq_artifacts_tenant_sha256"),
    sa.Index("ix_artifacts_session_id", "session_id"),
    sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_format"),
    sa.CheckConstraint("bytes >= 0", name="bytes_positive"),
    sa.CheckConstraint(_in("status", ARTIFACT_STATES), name="status_known"),
)

processing_runs = sa.Table(
    "processing_runs",
    metadata,
    uuid_pk(),
    tenant_fk(),
    _uuid_fk("session_id", "sessions.id", ondelete="RESTRICT"),
    # sha256 over the ordered (artifact id, sha256) pairs (spec 000 §6.2).
    sa.Column("artifact_set_hash", sa.Text, nullable=False),
    # Set by intake so the same upload twice makes one run; NULL for reprocess/retry runs.
    sa.Column("idempotency_key", sa.Text),
    sa.Column("requested_by", sa.Text, nullable=False, server_default="system"),
    # W3C trace context of the upload that made the run (NULL: none was traced or passed on);
    # its job attempts are spans of that trace (docs/operating.md#traces).
    sa.Column("traceparent", sa.Text),
    sa.Column("parser_version", sa.Text, nullable=False),
    sa.Column("pipeline_version", sa.Text, nullable=False),
    sa.Column("fusion_version", sa.Text),
    _jsonb("config"),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    # Jobs not yet in a terminal state; the transaction that brings it to 0 finalises the run.
    sa.Column("jobs_total", sa.Integer, nullable=False, server_default="0"),
    sa.Column("jobs_open", sa.Integer, nullable=False, server_default="0"),
    # Gating decisions with reasons (plan time and run time), spec 000 §4.2.
    _jsonb("gating", "[]"),
    _jsonb("features_available"),
    _jsonb("feature_reasons"),
    _jsonb("summary"),
    sa.Column("failure_reason", sa.Text),
    _uuid_fk("retry_of", "processing_runs.id", ondelete="SET NULL", nullable=True),
    created_at(),
    updated_at(),
    _ts("started_at"),
    _ts("completed_at"),
    # When retention began removing the outputs of this superseded run (it can never be made
    # active again); NULL while they are there (streams.retention.batch).
    _ts("outputs_removed_at"),
    sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_processing_runs_idempotency"),
    sa.Index("ix_processing_runs_session_id", "session_id"),
    # The claim counts each tenant's running runs (its active-run limit, migration 0015).
    sa.Index(
        "ix_processing_runs_running", "tenant_id", postgresql_where=sa.text("status = 'running'")
    ),
    sa.CheckConstraint(_in("status", RUN_STATES), name="status_known"),
    sa.CheckConstraint("jobs_open >= 0 AND jobs_open <= jobs_total", name="jobs_open_range"),
)

run_artifacts = sa.Table(
    "run_artifacts",
    metadata,
    _uuid_fk("run_id", "processing_runs.id", ondelete="CASCADE"),
    _uuid_fk("artifact_id", "artifacts.id", ondelete="RESTRICT"),
    sa.Column("position", sa.Integer, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "position", name="pk_run_artifacts"),
    sa.UniqueConstraint("run_id", "artifact_id", name="uq_run_artifacts_run_artifact"),
    sa.Index("ix_run_artifacts_artifact_id", "artifact_id"),
    sa.CheckConstraint("position >= 0", name="position_positive"),
)

jobs = sa.Table(
    "jobs",
    metadata,
    uuid_pk(),
    _uuid_fk("run_id", "processing_runs.id", ondelete="CASCADE"),
    # Denormalised from the run so the claim can count running jobs per tenant cheaply. No
    # plain index: every job UPDATE pays for each index (state sits in partial-index
    # predicates, so no update is HOT); ix_jobs_active serves the claim's counts, and
    # uq_jobs_run_name (run_id first) serves lookups by run.
    _uuid_fk("tenant_id", "tenants.id", ondelete="RESTRICT"),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("job_type", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="created"),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("pool", sa.Text, nullable=False),
    sa.Column("heavy", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("critical", sa.Boolean, nullable=False),
    sa.Column("attempt_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    # Attempts lost to their worker (reaped, drained): numbered, not counted against
    # max_attempts; bounded by the worker.max_lost setting instead.
    sa.Column("lost_count", sa.Integer, nullable=False, server_default="0"),
    # Dependencies not yet finished; the job is queued (or skipped) when it reaches 0.
    sa.Column("deps_pending", sa.Integer, nullable=False, server_default="0"),
    _ts("next_run_at"),
    _ts("locked_at"),
    # The first claim's instant (spec 004): each later attempt moves locked_at, not this.
    _ts("started_at"),
    sa.Column("locked_by", sa.Text),
    _ts("heartbeat_at"),
    sa.Column("soft_timeout_s", sa.Float, nullable=False),
    sa.Column("hard_timeout_s", sa.Float, nullable=False),
    # The job type's stale threshold (spec 000 §5.3): silent this long, the worker is lost.
    sa.Column("stale_after_s", sa.Float, nullable=False, server_default="600"),
    # Who asked the running job to stop ('operator' for a user's cancel), for its attempt row.
    sa.Column("cancel_source", sa.Text),
    sa.Column("last_error_code", sa.Text),
    sa.Column("last_error_message", sa.Text),
    sa.Column("idempotency_key", sa.Text),
    sa.Column("skip_reason", sa.Text),
    _jsonb("payload"),
    sa.Column("output", pg.JSONB),  # the job's summary, set when it succeeds
    created_at(),
    updated_at(),
    _ts("finished_at"),
    sa.UniqueConstraint("run_id", "name", name="uq_jobs_run_name"),
    # The claim walks this index in order: priority desc, then oldest first.
    sa.Index(
        "ix_jobs_claim",
        sa.text("priority DESC"),
        "created_at",
        postgresql_where=sa.text("state = 'queued'"),
    ),
    sa.Index(
        "ix_jobs_active",
        "tenant_id",
        postgresql_where=sa.text("state IN ('running', 'cancel_requested')"),
    ),
    sa.Index("ix_jobs_retry", "next_run_at", postgresql_where=sa.text("state = 'retry_wait'")),
    sa.CheckConstraint(_in("state", JOB_STATES), name="state_known"),
    sa.CheckConstraint(
        "lost_count >= 0 AND attempt_count >= lost_count"
        " AND attempt_count - lost_count <= max_attempts",
        name="attempts_range",
    ),
    sa.CheckConstraint("stale_after_s > 0", name="stale_after_positive"),
    sa.CheckConstraint("deps_pending >= 0", name="deps_pending_positive"),
    sa.CheckConstraint(
        "soft_timeout_s > 0 AND hard_timeout_s >= soft_timeout_s", name="timeouts_order"
    ),
    sa.CheckConstraint(
        "state NOT IN ('running', 'cancel_requested')"
        " OR (locked_by IS NOT NULL AND locked_at IS NOT NULL)",
        name="active_is_locked",
    ),
    sa.CheckConstraint("state <> 'retry_wait' OR next_run_at IS NOT NULL", name="retry_has_time"),
    sa.CheckConstraint("state <> 'skipped' OR skip_reason IS NOT NULL", name="skip_has_reason"),
)

job_edges = sa.Table(
    "job_edges",
    metadata,
    _uuid_fk("job_id", "jobs.id", ondelete="CASCADE"),
    _uuid_fk("depends_on_id", "jobs.id", ondelete="CASCADE"),
    # hard: the job needs the dependency to succeed; soft: it only waits for it to finish.
    sa.Column("hard", sa.Boolean, nullable=False),
    sa.PrimaryKeyConstraint("job_id", "depends_on_id", name="pk_job_edges"),
    sa.Index("ix_job_edges_depends_on_id", "depends_on_id"),
    sa.CheckConstraint("job_id <> depends_on_id", name="no_self_edge"),
)

job_attempts = sa.Table(
    "job_attempts",
    metadata,
    uuid_pk(),
    _uuid_fk("job_id", "jobs.id", ondelete="CASCADE"),
    sa.Column("attempt_number", sa.Integer, nullable=False),
    sa.Column("worker_id", sa.Text, nullable=False),
    # 'running' from the claim until the attempt ends (then ended_at is set).
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("step_type", sa.Text),  # the job type (spec 004's step history)
    _ts("started_at"),
    _ts("ended_at"),
    _ts("retry_at"),  # set when the attempt's end scheduled a retry of the job
    # Spec 004's taxonomy; error_sub_type is the stable code (e.g. CHECKSUM_MISMATCH).
    sa.Column("error_type", sa.Text),
    sa.Column("error_source", sa.Text),
    sa.Column("error_sub_type", sa.Text),
    sa.Column("error_severity", sa.SmallInteger),
    sa.Column("error_message", sa.Text),
    _jsonb("metrics"),
    sa.Column("logs_url", sa.Text),
    # The run's trace id (32 hex), so an attempt joins its logs and its span.
    sa.Column("trace_id", sa.Text),
    created_at(),
    sa.UniqueConstraint("job_id", "attempt_number", name="uq_job_attempts_job_attempt"),
    sa.CheckConstraint(_in("status", ATTEMPT_STATES), name="status_known"),
    sa.CheckConstraint("attempt_number >= 1", name="attempt_positive"),
    sa.CheckConstraint("error_severity BETWEEN 1 AND 5", name="severity_range"),
    sa.CheckConstraint(
        "(status IN ('running', 'succeeded')) = (error_sub_type IS NULL)",
        name="error_iff_unsuccessful",
    ),
    sa.CheckConstraint("(status = 'running') = (ended_at IS NULL)", name="running_is_open"),
    # Each row is written at the claim and updated once at the attempt's end: room on its
    # page keeps that update HOT (migration 0009).
    postgresql_with={"fillfactor": 70},
)

derived_datasets = sa.Table(
    "derived_datasets",
    metadata,
    uuid_pk(),
    _uuid_fk("run_id", "processing_runs.id", ondelete="CASCADE"),
    _uuid_fk("job_id", "jobs.id", ondelete="CASCADE"),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("dataset_type", sa.Text, nullable=False),
    sa.Column("storage_url", sa.Text, nullable=False),
    sa.Column("content_hash", sa.Text, nullable=False),
    sa.Column("schema_version", sa.Text, nullable=False),
    sa.Column("row_count", sa.BigInteger),
    sa.Column("bytes", sa.BigInteger),
    _jsonb("stats"),
    _ts("time_range_start"),
    _ts("time_range_end"),
    created_at(),
    sa.UniqueConstraint("run_id", "name", name="uq_derived_datasets_run_name"),
    sa.Index("ix_derived_datasets_job_id", "job_id"),
)

backfill_schedules = sa.Table(
    "backfill_schedules",
    metadata,
    # A backfill run by the clock (migration 0032): one row per tenant and name; a worker runs
    # a due one under its row lock and sets the next time from ``cron``.
    uuid_pk(),
    tenant_fk(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("cron", sa.Text, nullable=False),
    sa.Column("device", sa.Text),
    sa.Column("uploaded_within_s", sa.Float(53)),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("created_by", sa.Text, nullable=False),
    created_at(),
    sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_run_at", sa.DateTime(timezone=True)),
    sa.Column("last_outcome", pg.JSONB),
    sa.Column("last_error", sa.Text),
    sa.UniqueConstraint("tenant_id", "name", name="uq_backfill_schedules_tenant_name"),
    sa.CheckConstraint("uploaded_within_s > 0", name="within"),
    sa.Index("ix_backfill_schedules_due", "next_run_at", postgresql_where=sa.text("enabled")),
)

saved_tracks = sa.Table(
    "saved_tracks",
    metadata,
    # An operator's timing lines (migration 0033): one row per tenant and name, stamped into
    # every run the tenant creates afterwards (run config ``tracks``). Lines are the run
    # config's ``StartFinish`` objects (lat1, lon1, lat2, lon2); ``sectors`` a list of them.
    uuid_pk(),
    tenant_fk(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("start_finish", pg.JSONB, nullable=False),
    sa.Column("finish", pg.JSONB),
    sa.Column("sectors", pg.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    sa.Column("from_session", pg.UUID(as_uuid=True)),
    sa.Column("created_by", sa.Text, nullable=False),
    created_at(),
    sa.UniqueConstraint("tenant_id", "name", name="uq_saved_tracks_tenant_name"),
)
