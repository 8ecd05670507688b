"""jobs record when they first started (spec 004 ``started_at``)

Issue 27. A job's attempts each have their own ``started_at`` (``job_attempts``); the job
itself had only ``locked_at``, which each new attempt moves. ``jobs.started_at`` is the first
claim's instant, set by the claim (``coalesce``: later attempts keep it) and never changed
after; existing jobs take their first attempt's.

Revision ID: 0024_job_started_at
Revises: 0023_row_level_security
"""

from __future__ import annotations

from alembic import op

revision = "0024_job_started_at"
down_revision = "0023_row_level_security"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE jobs ADD COLUMN started_at timestamptz")
    op.execute(
        "UPDATE jobs j SET started_at = a.first FROM"
        " (SELECT job_id, min(started_at) AS first FROM job_attempts GROUP BY job_id) a"
        " WHERE a.job_id = j.id"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE jobs DROP COLUMN started_at")
