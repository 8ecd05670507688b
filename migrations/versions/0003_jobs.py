"""job engine: artifacts, sessions, processing runs, jobs, edges, attempts, derived datasets

Besides the tables, this revision installs the transition guards: a trigger on ``jobs.state``
and one on ``processing_runs.status`` refuse any change not listed below (the same pairs as
``stages.jobs.job_state`` / ``stages.jobs.run_state``; a test compares them pair by pair), and
derived dataset rows refuse UPDATE (they are immutable once recorded).

Revision ID: 0003_jobs
Revises: 0002_ingest
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_jobs"
down_revision = "0002_ingest"
branch_labels = None
depends_on = None

# Frozen copies of the transition tables as of this revision (migrations never import app code).
_JOB_TRANSITIONS = (
    "created>queued",
    "created>skipped",
    "created>cancelled",
    "queued>running",
    "queued>skipped",
    "queued>cancelled",
    "running>succeeded",
    "running>retry_wait",
    "running>failed",
    "running>cancel_requested",
    "retry_wait>queued",
    "retry_wait>cancelled",
    "cancel_requested>cancelled",
)
_RUN_TRANSITIONS = (
    "pending>running",
    "pending>failed",
    "pending>cancelled",
    "running>partial",
    "running>failed",
    "running>succeeded",
    "running>cancelled",
)


def _guard(table: str, column: str, pairs: tuple[str, ...], what: str) -> list[str]:
    allowed = ", ".join(f"'{p}'" for p in pairs)
    fn = f"tideway_{table}_{column}_guard"
    return [
        f"""
        CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT (OLD.{column} || '>' || NEW.{column} = ANY (ARRAY[{allowed}])) THEN
                RAISE EXCEPTION 'illegal {what} transition % -> %', OLD.{column}, NEW.{column}
                    USING ERRCODE = 'check_violation', CONSTRAINT = '{fn}';
            END IF;
            RETURN NEW;
        END $$
        """,
        f"""
        CREATE TRIGGER {fn} BEFORE UPDATE OF {column} ON {table}
        FOR EACH ROW WHEN (OLD.{column} IS DISTINCT FROM NEW.{column})
        EXECUTE FUNCTION {fn}()
        """,
    ]


_GUARDS = [
    *_guard("jobs", "state", _JOB_TRANSITIONS, "job"),
    *_guard("processing_runs", "status", _RUN_TRANSITIONS, "run"),
    """
    CREATE FUNCTION tideway_derived_datasets_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'derived datasets are immutable (%)', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tideway_derived_datasets_immutable';
    END $$
    """,
    """
    CREATE TRIGGER tideway_derived_datasets_immutable BEFORE UPDATE ON derived_datasets
    FOR EACH ROW EXECUTE FUNCTION tideway_derived_datasets_immutable()
    """,
]
_DROP_GUARDS = [
    "DROP TRIGGER tideway_derived_datasets_immutable ON derived_datasets",
    "DROP FUNCTION tideway_derived_datasets_immutable()",
    "DROP TRIGGER tideway_processing_runs_status_guard ON processing_runs",
    "DROP FUNCTION tideway_processing_runs_status_guard()",
    "DROP TRIGGER tideway_jobs_state_guard ON jobs",
    "DROP FUNCTION tideway_jobs_state_guard()",
]


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("device_id", sa.UUID(), nullable=False),
        sa.Column("active_run_id", sa.UUID(), nullable=True),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("query_ready", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'ready', 'failed')", name=op.f("ck_sessions_status_known")
        ),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
            name=op.f("fk_sessions_device_id_devices"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_sessions_tenant_id_tenants"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index("ix_sessions_device_id", "sessions", ["device_id"], unique=False)
    op.create_index(op.f("ix_sessions_tenant_id"), "sessions", ["tenant_id"], unique=False)
    op.create_table(
        "artifacts",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=True),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("content_type", sa.Text(), nullable=True),
        sa.Column("storage_url", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default="uploaded", nullable=False),
        sa.Column("format_detected", sa.Text(), nullable=True),
        sa.Column("uploaded_by", sa.Text(), nullable=True),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_artifacts_sha256_format")),
        sa.CheckConstraint(
            "status IN ('uploaded', 'validated', 'rejected', 'deleted')",
            name=op.f("ck_artifacts_status_known"),
        ),
        sa.CheckConstraint("bytes >= 0", name=op.f("ck_artifacts_bytes_positive")),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_artifacts_session_id_sessions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_artifacts_tenant_id_tenants"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint("tenant_id", "sha256", name="uq_artifacts_tenant_sha256"),
    )
    op.create_index("ix_artifacts_session_id", "artifacts", ["session_id"], unique=False)
    op.create_index(op.f("ix_artifacts_tenant_id"), "artifacts", ["tenant_id"], unique=False)
    op.create_table(
        "processing_runs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("artifact_set_hash", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.Text(), server_default="system", nullable=False),
        sa.Column("parser_version", sa.Text(), nullable=False),
        sa.Column("pipeline_version", sa.Text(), nullable=False),
        sa.Column("fusion_version", sa.Text(), nullable=True),
        sa.Column(
            "config",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("jobs_total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("jobs_open", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "gating",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "features_available",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "feature_reasons",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "summary",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("retry_of", sa.UUID(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'partial', 'failed', 'succeeded', 'cancelled')",
            name=op.f("ck_processing_runs_status_known"),
        ),
        sa.CheckConstraint(
            "jobs_open >= 0 AND jobs_open <= jobs_total",
            name=op.f("ck_processing_runs_jobs_open_range"),
        ),
        sa.ForeignKeyConstraint(
            ["retry_of"],
            ["processing_runs.id"],
            name=op.f("fk_processing_runs_retry_of_processing_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_processing_runs_session_id_sessions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_processing_runs_tenant_id_tenants"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processing_runs")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_processing_runs_idempotency"),
    )
    op.create_index(
        "ix_processing_runs_session_id", "processing_runs", ["session_id"], unique=False
    )
    op.create_index(
        op.f("ix_processing_runs_tenant_id"), "processing_runs", ["tenant_id"], unique=False
    )
    op.create_foreign_key(
        "fk_sessions_active_run_id_processing_runs",
        "sessions",
        "processing_runs",
        ["active_run_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("job_type", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default="created", nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("heavy", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("critical", sa.Boolean(), nullable=False),
        sa.Column("attempt_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("deps_pending", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_by", sa.Text(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("soft_timeout_s", sa.Float(), nullable=False),
        sa.Column("hard_timeout_s", sa.Float(), nullable=False),
        sa.Column("last_error_code", sa.Text(), nullable=True),
        sa.Column("last_error_message", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("skip_reason", sa.Text(), nullable=True),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("output", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state <> 'retry_wait' OR next_run_at IS NOT NULL", name=op.f("ck_jobs_retry_has_time")
        ),
        sa.CheckConstraint(
            "state <> 'skipped' OR skip_reason IS NOT NULL", name=op.f("ck_jobs_skip_has_reason")
        ),
        sa.CheckConstraint(
            "state IN ('created', 'queued', 'running', 'succeeded', 'failed', 'retry_wait',"
            " 'cancel_requested', 'cancelled', 'skipped')",
            name=op.f("ck_jobs_state_known"),
        ),
        sa.CheckConstraint(
            "state NOT IN ('running', 'cancel_requested')"
            " OR (locked_by IS NOT NULL AND locked_at IS NOT NULL)",
            name=op.f("ck_jobs_active_is_locked"),
        ),
        sa.CheckConstraint(
            "attempt_count >= 0 AND attempt_count <= max_attempts",
            name=op.f("ck_jobs_attempts_range"),
        ),
        sa.CheckConstraint("deps_pending >= 0", name=op.f("ck_jobs_deps_pending_positive")),
        sa.CheckConstraint(
            "soft_timeout_s > 0 AND hard_timeout_s >= soft_timeout_s",
            name=op.f("ck_jobs_timeouts_order"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["processing_runs.id"],
            name=op.f("fk_jobs_run_id_processing_runs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_jobs_tenant_id_tenants"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("run_id", "name", name="uq_jobs_run_name"),
    )
    op.create_index(
        "ix_jobs_active",
        "jobs",
        ["tenant_id"],
        unique=False,
        postgresql_where=sa.text("state IN ('running', 'cancel_requested')"),
    )
    op.create_index(
        "ix_jobs_claim",
        "jobs",
        [sa.literal_column("priority DESC"), "created_at"],
        unique=False,
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_index(
        "ix_jobs_retry",
        "jobs",
        ["next_run_at"],
        unique=False,
        postgresql_where=sa.text("state = 'retry_wait'"),
    )
    op.create_table(
        "run_artifacts",
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("artifact_id", sa.UUID(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.CheckConstraint("position >= 0", name=op.f("ck_run_artifacts_position_positive")),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_run_artifacts_artifact_id_artifacts"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["processing_runs.id"],
            name=op.f("fk_run_artifacts_run_id_processing_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "position", name="pk_run_artifacts"),
        sa.UniqueConstraint("run_id", "artifact_id", name="uq_run_artifacts_run_artifact"),
    )
    op.create_index("ix_run_artifacts_artifact_id", "run_artifacts", ["artifact_id"], unique=False)
    op.create_table(
        "derived_datasets",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("dataset_type", sa.Text(), nullable=False),
        sa.Column("storage_url", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Text(), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column(
            "stats",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("time_range_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("time_range_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_derived_datasets_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["processing_runs.id"],
            name=op.f("fk_derived_datasets_run_id_processing_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_derived_datasets")),
        sa.UniqueConstraint("run_id", "name", name="uq_derived_datasets_run_name"),
    )
    op.create_index("ix_derived_datasets_job_id", "derived_datasets", ["job_id"], unique=False)
    op.create_table(
        "job_attempts",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("attempt_number", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error_type", sa.Text(), nullable=True),
        sa.Column("error_source", sa.Text(), nullable=True),
        sa.Column("error_sub_type", sa.Text(), nullable=True),
        sa.Column("error_severity", sa.SmallInteger(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column(
            "metrics",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("logs_url", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "(status = 'succeeded') = (error_sub_type IS NULL)",
            name=op.f("ck_job_attempts_error_iff_unsuccessful"),
        ),
        sa.CheckConstraint(
            "status IN ('succeeded', 'failed', 'timed_out', 'cancelled')",
            name=op.f("ck_job_attempts_status_known"),
        ),
        sa.CheckConstraint("attempt_number >= 1", name=op.f("ck_job_attempts_attempt_positive")),
        sa.CheckConstraint(
            "error_severity BETWEEN 1 AND 5", name=op.f("ck_job_attempts_severity_range")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_attempts_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_attempts")),
        sa.UniqueConstraint("job_id", "attempt_number", name="uq_job_attempts_job_attempt"),
    )
    op.create_table(
        "job_edges",
        sa.Column("job_id", sa.UUID(), nullable=False),
        sa.Column("depends_on_id", sa.UUID(), nullable=False),
        sa.Column("hard", sa.Boolean(), nullable=False),
        sa.CheckConstraint("job_id <> depends_on_id", name=op.f("ck_job_edges_no_self_edge")),
        sa.ForeignKeyConstraint(
            ["depends_on_id"],
            ["jobs.id"],
            name=op.f("fk_job_edges_depends_on_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_edges_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id", name="pk_job_edges"),
    )
    op.create_index("ix_job_edges_depends_on_id", "job_edges", ["depends_on_id"], unique=False)

    for statement in _GUARDS:
        op.execute(statement)


def downgrade() -> None:
    for statement in _DROP_GUARDS:
        op.execute(statement)
    op.drop_constraint("fk_sessions_active_run_id_processing_runs", "sessions", type_="foreignkey")
    op.drop_index("ix_job_edges_depends_on_id", table_name="job_edges")
    op.drop_table("job_edges")
    op.drop_table("job_attempts")
    op.drop_index("ix_derived_datasets_job_id", table_name="derived_datasets")
    op.drop_table("derived_datasets")
    op.drop_index("ix_run_artifacts_artifact_id", table_name="run_artifacts")
    op.drop_table("run_artifacts")
    op.drop_index(
        "ix_jobs_retry", table_name="jobs", postgresql_where=sa.text("state = 'retry_wait'")
    )
    op.drop_index("ix_jobs_claim", table_name="jobs", postgresql_where=sa.text("state = 'queued'"))
    op.drop_index(
        "ix_jobs_active",
        table_name="jobs",
        postgresql_where=sa.text("state IN ('running', 'cancel_requested')"),
    )
    op.drop_table("jobs")
    op.drop_index(op.f("ix_processing_runs_tenant_id"), table_name="processing_runs")
    op.drop_index("ix_processing_runs_session_id", table_name="processing_runs")
    op.drop_table("processing_runs")
    op.drop_index(op.f("ix_artifacts_tenant_id"), table_name="artifacts")
    op.drop_index("ix_artifacts_session_id", table_name="artifacts")
    op.drop_table("artifacts")
    op.drop_index(op.f("ix_sessions_tenant_id"), table_name="sessions")
    op.drop_index("ix_sessions_device_id", table_name="sessions")
    op.drop_table("sessions")
