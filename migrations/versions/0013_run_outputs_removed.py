"""retention of the batch half: when a superseded run's outputs were removed

``processing_runs.outputs_removed_at``: set by retention (``streams.retention.batch``) when
it starts removing the datasets and ClickHouse rows of a run that is no longer its session's
active run. From then on the run can never be made active again (``rollback`` refuses it); the
run row, its jobs and attempts stay for audit. NULL: its outputs are there.

Revision ID: 0013_run_outputs_removed
Revises: 0012_partitioned_storage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_run_outputs_removed"
down_revision = "0012_partitioned_storage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "processing_runs",
        sa.Column("outputs_removed_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("processing_runs", "outputs_removed_at")
