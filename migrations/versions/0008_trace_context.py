"""trace context on runs and job attempts

* ``processing_runs.traceparent``: the W3C trace context of the upload that made the run (the
  upload's span when tracing is on, else the caller's ``traceparent`` if it sent one). Every
  job attempt of the run is a span of that trace.
* ``job_attempts.trace_id``: the run's trace id (32 hex digits), so that an attempt's row, its
  log lines (``trace_id`` field) and its span join (docs/operating.md#traces).

Both are nullable: runs made before this revision, or without any trace, have none.

Revision ID: 0008_trace_context
Revises: 0007_dead_letter_resolution
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_trace_context"
down_revision = "0007_dead_letter_resolution"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("processing_runs", sa.Column("traceparent", sa.Text(), nullable=True))
    op.add_column("job_attempts", sa.Column("trace_id", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("job_attempts", "trace_id")
    op.drop_column("processing_runs", "traceparent")
