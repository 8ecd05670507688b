"""job lifecycle: per-type stale thresholds, lost workers, running attempts, cancel source

* ``jobs.stale_after_s``: the job type's stale threshold (spec 000 §5.3), planned from its
  ``JobSpec`` like the timeouts; the reaper takes a job back once its worker has been silent
  that long. Rows made before this revision get the old global default, 600 s.
* ``jobs.lost_count``: attempts the job lost to its worker (reaped after a kill -9 or an OOM
  kill, released by a draining worker). They are numbered like any attempt but are not the
  job's own failures: the attempt bound becomes ``attempt_count - lost_count <=
  max_attempts``, and lost attempts have their own bound (``worker.max_lost``).
* ``jobs.cancel_source``: who asked a running job to stop (``operator`` for a user's cancel);
  the acknowledging attempt records it as its ``error_source``.
* ``job_attempts``: a row is written when the attempt starts (status ``running``, no
  ``ended_at``) and completed when it ends; ``step_type`` is the job type (spec 004's step
  history) and ``retry_at`` when the attempt's end scheduled a retry. Existing rows get their
  job's type.

Revision ID: 0009_job_lifecycle
Revises: 0008_trace_context
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_job_lifecycle"
down_revision = "0008_trace_context"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("stale_after_s", sa.Float(), server_default="600", nullable=False)
    )
    op.add_column("jobs", sa.Column("lost_count", sa.Integer(), server_default="0", nullable=False))
    op.add_column("jobs", sa.Column("cancel_source", sa.Text(), nullable=True))
    op.drop_constraint(op.f("ck_jobs_attempts_range"), "jobs", type_="check")
    op.create_check_constraint(
        op.f("ck_jobs_attempts_range"),
        "jobs",
        "lost_count >= 0 AND attempt_count >= lost_count"
        " AND attempt_count - lost_count <= max_attempts",
    )
    op.create_check_constraint(op.f("ck_jobs_stale_after_positive"), "jobs", "stale_after_s > 0")

    op.add_column("job_attempts", sa.Column("step_type", sa.Text(), nullable=True))
    op.add_column("job_attempts", sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE job_attempts a SET step_type = j.job_type FROM jobs j WHERE j.id = a.job_id")
    op.drop_constraint(op.f("ck_job_attempts_status_known"), "job_attempts", type_="check")
    op.create_check_constraint(
        op.f("ck_job_attempts_status_known"),
        "job_attempts",
        "status IN ('running', 'succeeded', 'failed', 'timed_out', 'cancelled')",
    )
    op.drop_constraint(
        op.f("ck_job_attempts_error_iff_unsuccessful"), "job_attempts", type_="check"
    )
    op.create_check_constraint(
        op.f("ck_job_attempts_error_iff_unsuccessful"),
        "job_attempts",
        "(status IN ('running', 'succeeded')) = (error_sub_type IS NULL)",
    )
    op.create_check_constraint(
        op.f("ck_job_attempts_running_is_open"),
        "job_attempts",
        "(status = 'running') = (ended_at IS NULL)",
    )
    # Each row is updated once, soon after it is written: room on its page keeps that update
    # HOT (no index entries rewritten).
    op.execute("ALTER TABLE job_attempts SET (fillfactor = 70)")


def downgrade() -> None:
    # Attempts still running when downgrading are closed as lost (the old schema has no
    # running rows); lost attempts are folded back into the attempt count.
    op.execute(
        "UPDATE job_attempts SET status = 'failed', ended_at = now(),"
        " error_sub_type = 'WORKER_LOST' WHERE status = 'running'"
    )
    op.execute("ALTER TABLE job_attempts RESET (fillfactor)")
    op.drop_constraint(op.f("ck_job_attempts_running_is_open"), "job_attempts", type_="check")
    op.drop_constraint(
        op.f("ck_job_attempts_error_iff_unsuccessful"), "job_attempts", type_="check"
    )
    op.create_check_constraint(
        op.f("ck_job_attempts_error_iff_unsuccessful"),
        "job_attempts",
        "(status = 'succeeded') = (error_sub_type IS NULL)",
    )
    op.drop_constraint(op.f("ck_job_attempts_status_known"), "job_attempts", type_="check")
    op.create_check_constraint(
        op.f("ck_job_attempts_status_known"),
        "job_attempts",
        "status IN ('succeeded', 'failed', 'timed_out', 'cancelled')",
    )
    op.drop_column("job_attempts", "retry_at")
    op.drop_column("job_attempts", "step_type")

    op.drop_constraint(op.f("ck_jobs_stale_after_positive"), "jobs", type_="check")
    op.drop_constraint(op.f("ck_jobs_attempts_range"), "jobs", type_="check")
    op.execute("UPDATE jobs SET max_attempts = greatest(max_attempts, attempt_count)")
    op.create_check_constraint(
        op.f("ck_jobs_attempts_range"),
        "jobs",
        "attempt_count >= 0 AND attempt_count <= max_attempts",
    )
    op.drop_column("jobs", "cancel_source")
    op.drop_column("jobs", "lost_count")
    op.drop_column("jobs", "stale_after_s")
