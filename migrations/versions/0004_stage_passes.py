"""stage logs stored as one row per processing pass; ``ingestion_stage_logs`` becomes a view

A pass (one envelope, one attempt) reaches up to six stages, and the hot path used to write a
row for each: three quarters of its rows. ``ingestion_stage_passes`` keeps one row per pass
with the stages it reached, in order, as parallel arrays (stage, status, duration, error code
and message; snapshots as JSON arrays). The view ``ingestion_stage_logs`` unnests them into
exactly the rows and columns the table had, so every reader keeps one row per stage reached.

Existing stage logs are folded into passes on upgrade and unfolded on downgrade.

Revision ID: 0004_stage_passes
Revises: 0003_jobs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_stage_passes"
down_revision = "0003_jobs"
branch_labels = None
depends_on = None

_STAGES = "'ingress', 'validate', 'mutate', 'derive', 'persist', 'publish'"

_VIEW = """
CREATE VIEW ingestion_stage_logs AS
SELECT p.message_id, p.attempt, s.stage, s.status, s.duration_us, s.error_code,
       s.error_message,
       nullif(p.input_snapshots -> (s.n - 1)::int, 'null'::jsonb) AS input_snapshot,
       nullif(p.output_snapshots -> (s.n - 1)::int, 'null'::jsonb) AS output_snapshot,
       p.created_at
FROM ingestion_stage_passes p,
     unnest(p.stages, p.statuses, p.durations_us, p.error_codes, p.error_messages)
         WITH ORDINALITY AS s(stage, status, duration_us, error_code, error_message, n)
"""


def upgrade() -> None:
    op.create_table(
        "ingestion_stage_passes",
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("stages", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("statuses", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("durations_us", postgresql.ARRAY(sa.Integer()), nullable=False),
        sa.Column("error_codes", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("error_messages", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("input_snapshots", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("output_snapshots", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            f"stages <@ ARRAY[{_STAGES}]::text[]",
            name=op.f("ck_ingestion_stage_passes_stages_known"),
        ),
        sa.CheckConstraint(
            "statuses <@ ARRAY['ok', 'failed']::text[]",
            name=op.f("ck_ingestion_stage_passes_statuses_known"),
        ),
        sa.CheckConstraint(
            "cardinality(stages) >= 1 AND cardinality(statuses) = cardinality(stages) "
            "AND cardinality(durations_us) = cardinality(stages)",
            name=op.f("ck_ingestion_stage_passes_aligned"),
        ),
    )
    op.create_index(
        "ix_ingestion_stage_passes_message_id",
        "ingestion_stage_passes",
        ["message_id"],
        unique=False,
        postgresql_using="brin",
    )
    op.execute(
        f"""
        INSERT INTO ingestion_stage_passes (message_id, attempt, stages, statuses, durations_us,
            error_codes, error_messages, input_snapshots, output_snapshots, created_at)
        SELECT message_id, attempt,
               array_agg(stage ORDER BY o), array_agg(status ORDER BY o),
               array_agg(duration_us ORDER BY o),
               array_agg(error_code ORDER BY o), array_agg(error_message ORDER BY o),
               CASE WHEN bool_or(input_snapshot IS NOT NULL)
                    THEN jsonb_agg(input_snapshot ORDER BY o) END,
               CASE WHEN bool_or(output_snapshot IS NOT NULL)
                    THEN jsonb_agg(output_snapshot ORDER BY o) END,
               min(created_at)
        FROM (SELECT *, array_position(ARRAY[{_STAGES}], stage) AS o
              FROM ingestion_stage_logs) l
        GROUP BY message_id, attempt
        """
    )
    op.drop_index("ix_ingestion_stage_logs_message_id", table_name="ingestion_stage_logs")
    op.drop_table("ingestion_stage_logs")
    op.execute(_VIEW)


def downgrade() -> None:
    op.execute("ALTER VIEW ingestion_stage_logs RENAME TO ingestion_stage_logs_unfolded")
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
            f"stage IN ({_STAGES})", name=op.f("ck_ingestion_stage_logs_stage_known")
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
    op.execute("INSERT INTO ingestion_stage_logs SELECT * FROM ingestion_stage_logs_unfolded")
    op.execute("DROP VIEW ingestion_stage_logs_unfolded")
    op.drop_index("ix_ingestion_stage_passes_message_id", table_name="ingestion_stage_passes")
    op.drop_table("ingestion_stage_passes")
