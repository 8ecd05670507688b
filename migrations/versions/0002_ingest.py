"""ingestion tables: messages, stage logs, device telemetry, dead letters

Besides the tables, this revision installs the SQL half of the two streaming state machines
(``stages.ingest.status`` and ``stages.ingest.processing_state``): a ``BEFORE UPDATE`` trigger
per table whose ``WHEN`` clause lets every legal transition through without calling anything
and raises ``check_violation`` for the rest (the CHECK constraints bound the vocabularies).
The pairs are spelled out here (a migration is a snapshot);
``tests/integration/ingest/test_state_guards.py`` walks every pair against the Python tables
so the two cannot drift.

Revision ID: 0002_ingest
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_ingest"
down_revision = "0001"
branch_labels = None
depends_on = None

_STATUS_MOVES = (
    "queued>processing",
    "queued>duplicate",
    "processing>completed",
    "processing>failed_validation",
    "processing>inactive_skipped",
    "processing>failed_terminal",
    "failed_terminal>completed",
)
_STATE_MOVES = ("processed>publish_failed", "publish_failed>processed")


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _guard(table: str, column: str, key: str, moves: tuple[str, ...]) -> None:
    fn = f"{table}_{column}_guard"
    op.execute(
        f"""
        CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'illegal {column} transition % -> % for {table} id %',
                OLD.{column}, NEW.{column}, OLD.{key} USING ERRCODE = 'check_violation';
        END
        $$
        """
    )
    # The WHEN clause is evaluated without a function call, so legal updates pay almost nothing.
    op.execute(
        f"CREATE TRIGGER {fn}_update BEFORE UPDATE OF {column} ON {table} FOR EACH ROW "
        f"WHEN (OLD.{column} IS DISTINCT FROM NEW.{column} "
        f"AND (OLD.{column} || '>' || NEW.{column}) NOT IN ({_quoted(moves)})) "
        f"EXECUTE FUNCTION {fn}()"
    )


def _drop_guard(table: str, column: str) -> None:
    fn = f"{table}_{column}_guard"
    op.execute(f"DROP TRIGGER IF EXISTS {fn}_update ON {table}")
    op.execute(f"DROP FUNCTION IF EXISTS {fn}()")


def upgrade() -> None:
    op.create_table(
        "ingestion_messages",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("source_deduplication_key", sa.Text(collation="C"), nullable=True),
        sa.Column("duplicate_of", sa.BigInteger(), nullable=True),
        sa.Column("stream_seq", sa.BigInteger(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("traceparent", sa.Text(), nullable=True),
        sa.Column("payload_bytes", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=True),
        sa.Column("device_id", sa.UUID(), nullable=True),
        sa.Column("schema_version_id", sa.UUID(), nullable=True),
        sa.Column("schema_topic_id", sa.UUID(), nullable=True),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("1"), nullable=False),
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
            "(status = 'duplicate') = (duplicate_of IS NOT NULL)"
            " AND (status = 'duplicate') = (source_deduplication_key IS NULL)",
            name=op.f("ck_ingestion_messages_duplicate_shape"),
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'processing', 'completed', 'failed_validation',"
            " 'inactive_skipped', 'failed_terminal', 'duplicate')",
            name=op.f("ck_ingestion_messages_status_known"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingestion_messages")),
        sa.UniqueConstraint(
            "source_deduplication_key",
            name=op.f("uq_ingestion_messages_source_deduplication_key"),
        ),
    )
    op.create_index(
        "uq_ingestion_messages_duplicate_receipt",
        "ingestion_messages",
        ["stream_seq", "received_at"],
        unique=True,
        postgresql_where=sa.text("duplicate_of IS NOT NULL"),
    )
    op.create_table(
        "ingestion_stage_logs",
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("duration_us", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("input_snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("output_snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "stage IN ('ingress', 'validate', 'mutate', 'derive', 'persist', 'publish')",
            name=op.f("ck_ingestion_stage_logs_stage_known"),
        ),
        sa.CheckConstraint(
            "status IN ('ok', 'failed')", name=op.f("ck_ingestion_stage_logs_status_known")
        ),
    )
    op.create_index(
        "ix_ingestion_stage_logs_message_id",
        "ingestion_stage_logs",
        ["message_id"],
        unique=False,
        postgresql_using="brin",
    )
    op.create_table(
        "device_telemetry_logs",
        sa.Column("ingestion_message_id", sa.BigInteger(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("device_id", sa.UUID(), nullable=False),
        sa.Column("schema_version_id", sa.UUID(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("processing_state", sa.Text(), nullable=False),
        sa.Column("parameter_values", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("validation_issues", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
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
            "processing_state IN ('processed', 'invalid', 'inactive_skipped', 'publish_failed')",
            name=op.f("ck_device_telemetry_logs_state_known"),
        ),
        sa.PrimaryKeyConstraint("ingestion_message_id", name=op.f("pk_device_telemetry_logs")),
    )
    op.create_index(
        "ix_device_telemetry_logs_device_measured",
        "device_telemetry_logs",
        ["device_id", "measured_at"],
        unique=False,
    )
    op.create_table(
        "dead_letters",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("ingestion_message_id", sa.BigInteger(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=True),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column(
            "headers",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("reason_code", sa.Text(), nullable=False),
        sa.Column("failures", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("redrive_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'open'"), nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('open', 'resolved')", name=op.f("ck_dead_letters_state_known")
        ),
        sa.ForeignKeyConstraint(
            ["ingestion_message_id"],
            ["ingestion_messages.id"],
            name=op.f("fk_dead_letters_ingestion_message_id_ingestion_messages"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letters")),
        sa.UniqueConstraint(
            "ingestion_message_id", name=op.f("uq_dead_letters_ingestion_message_id")
        ),
    )
    op.create_index(
        "ix_dead_letters_state_first_seen",
        "dead_letters",
        ["state", "first_seen_at"],
        unique=False,
    )
    _guard("ingestion_messages", "status", "id", _STATUS_MOVES)
    _guard("device_telemetry_logs", "processing_state", "ingestion_message_id", _STATE_MOVES)


def downgrade() -> None:
    _drop_guard("device_telemetry_logs", "processing_state")
    _drop_guard("ingestion_messages", "status")
    op.drop_index("ix_dead_letters_state_first_seen", table_name="dead_letters")
    op.drop_table("dead_letters")
    op.drop_index("ix_device_telemetry_logs_device_measured", table_name="device_telemetry_logs")
    op.drop_table("device_telemetry_logs")
    op.drop_index("ix_ingestion_stage_logs_message_id", table_name="ingestion_stage_logs")
    op.drop_table("ingestion_stage_logs")
    op.drop_index(
        "uq_ingestion_messages_duplicate_receipt",
        table_name="ingestion_messages",
        postgresql_where=sa.text("duplicate_of IS NOT NULL"),
    )
    op.drop_table("ingestion_messages")
