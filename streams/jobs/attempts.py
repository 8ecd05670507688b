"""Ending an attempt without success, and explaining a refused update.

``end_attempt`` is shared by ``fail`` (the worker), ``acknowledge_cancel`` and the reaper: one
guarded statement ends the attempt (``retry_wait``, ``failed`` or ``cancelled``) and writes its
``job_attempts`` row, then a final outcome is settled in the same transaction (a critical job
stops its run, an optional one skips its hard dependents, a run whose last job ended is
finalised).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from stages.jobs.errors import AttemptFailure, recorded_severity
from stages.jobs.graph import Dag
from stages.jobs.job_state import JobState
from streams.adapters.postgres import Conn
from streams.jobs import sql
from streams.jobs.model import ClaimedJob, FailOutcome, FinishedRun, Outcome
from streams.jobs.settle import Closed, settle

Now = datetime | None


async def end_attempt(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    dag: Dag,
    worker: str,
    attempt: int,
    expected: JobState,
    target: JobState,
    delay_s: float | None,
    error: AttemptFailure,
    critical: bool,
    attempt_status: str,
    lost: bool = False,
    now: Now,
    channel: str,
) -> FailOutcome:
    """End attempt ``attempt`` of ``job_id`` held by ``worker`` (in state ``expected``).

    ``lost``: the attempt was lost to its worker (reaped, drained), so it counts in the job's
    ``lost_count`` rather than against its own attempts. ``dag``: the DAG the runtime runs (the
    failed job's reason, and the settling that follows)."""
    final = target in (JobState.FAILED, JobState.CANCELLED)
    row = await conn.fetchrow(
        sql.END_ATTEMPT,
        now,
        worker,
        job_id,
        attempt,
        target.value,
        delay_s,
        error.code,
        error.message,
        attempt_status,
        error.error_type.value,
        error.source.value,
        recorded_severity(error, final=final, critical=critical),
        {},
        expected.value,
        lost,
    )
    if row is None:
        return FailOutcome(outcome=await holder_outcome(conn, job_id, worker, attempt))
    finished_runs: tuple[FinishedRun, ...] = ()
    if final:
        reason = "CANCELLED" if target is JobState.CANCELLED else dag.failed_reason(row["job_type"])
        closed = Closed(
            id=job_id,
            run_id=row["run_id"],
            name=row["name"],
            critical=critical,
            state=target,
            reason=reason,
        )
        finished = [row["run_id"]] if row["jobs_open"] == 0 else []
        finished_runs = await settle(
            conn, dag=dag, closed=[closed], finished_runs=finished, now=now, channel=channel
        )
    return FailOutcome(
        outcome=Outcome.APPLIED,
        state=target,
        next_run_at=row["next_run_at"],
        finished_runs=finished_runs,
    )


async def refusal(conn: Conn, job: ClaimedJob) -> Outcome:
    return await holder_outcome(conn, job.id, job.locked_by, job.attempt)


async def holder_outcome(conn: Conn, job_id: uuid.UUID, worker: str, attempt: int) -> Outcome:
    row = await conn.fetchrow(sql.JOB_HOLDER, job_id)
    if (
        row is not None
        and row["state"] == JobState.CANCEL_REQUESTED
        and row["locked_by"] == worker
        and row["attempt_count"] == attempt
    ):
        return Outcome.CANCEL_REQUESTED
    return Outcome.LOST
