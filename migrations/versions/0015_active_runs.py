"""index the running runs for the per-tenant active-run limit

The job claim (``streams.jobs.sql.CLAIM``) counts each tenant's running runs on every claim to
hold ``max_active_runs`` (spec 000 §12). Without an index that is a scan of every run ever
made; the partial index holds only the running ones (a few per tenant), whatever the history.
``processing_runs`` is not partitioned, so the index is built ``CONCURRENTLY`` (no write lock).

Revision ID: 0015_active_runs
Revises: 0014_console
"""

from __future__ import annotations

from alembic import op

revision = "0015_active_runs"
down_revision = "0014_console"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_processing_runs_running"
            " ON processing_runs (tenant_id) WHERE status = 'running'"
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_processing_runs_running")
