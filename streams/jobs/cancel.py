"""Cancellation of runs and jobs (spec 000 §10).

Only a run that has not ended can be cancelled: a succeeded, partial, failed or cancelled run
refuses with ``RUN_TERMINAL`` and is left exactly as it was (its ``completed_at``, its
features, the session's pointer; nothing is announced). The check holds the run's row, so a
finalisation committing at the same moment is either seen (refused) or waits for the cancel.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from schemas import error_codes as codes
from stages.jobs.errors import ErrorSource
from stages.jobs.graph import Dag
from stages.jobs.job_state import JobState
from stages.jobs.run_state import TERMINAL_RUN, RunState
from streams.adapters.postgres import Conn
from streams.errors import NotFoundError, UsageError
from streams.jobs import sql
from streams.jobs.settle import Closed, finalise, settle
from streams.jobs.txn import atomically

Now = datetime | None


@dataclass(frozen=True, kw_only=True)
class CancelSummary:
    """What ``cancel_run`` did: jobs cancelled outright and running jobs asked to stop."""

    run_id: uuid.UUID
    cancelled: int
    requested: int
    status: RunState


async def cancel_run(
    conn: Conn,
    run_id: uuid.UUID,
    *,
    dag: Dag,
    source: ErrorSource = ErrorSource.OPERATOR,
    now: Now = None,
    channel: str | None = None,
) -> CancelSummary:
    """Cancel a run (spec 000 §10): status ``cancelled``, not-started jobs ``cancelled``,
    running jobs ``cancel_requested`` (finalised when the last one acknowledges).

    ``source``: who asked (a user by default); each running job's acknowledging attempt
    records it as its error source. A run that has ended raises :class:`UsageError`
    ``RUN_TERMINAL`` and is not touched. ``channel``: the deployment's jobs channel; when
    given, the workers running the run's jobs are woken to stop them at once (otherwise they
    learn it at their next heartbeat)."""

    async def work(c: Conn) -> CancelSummary:
        status = await c.fetchval(sql.LOCK_RUN_STATUS, run_id)
        if status is None:
            raise NotFoundError(f"no run {run_id}")
        if RunState(status) in TERMINAL_RUN:
            raise UsageError(
                f"run {run_id} has already ended ({status}); there is nothing to cancel",
                code=codes.RUN_TERMINAL,
            )
        row = await c.fetchrow(
            sql.STOP_RUN,
            now,
            run_id,
            RunState.CANCELLED.value,
            None,
            "RUN_CANCELLED",
            source.value,
        )
        if row is None:
            raise NotFoundError(f"no run {run_id}")
        if row["requested"] and channel is not None:
            await c.execute(sql.NOTIFY_STOP, channel)
        if row["jobs_open"] == 0:
            await finalise(c, run_id, dag=dag, now=now)
        return CancelSummary(
            run_id=run_id,
            cancelled=row["stopped"],
            requested=row["requested"],
            status=RunState(row["status"]),
        )

    return await atomically(conn, work)


async def cancel_job(
    conn: Conn,
    job_id: uuid.UUID,
    *,
    dag: Dag,
    source: ErrorSource = ErrorSource.OPERATOR,
    now: Now = None,
    channel: str,
) -> JobState:
    """Cancel one job: not started -> ``cancelled`` (its dependents react as to a failure:
    a critical job's run is cancelled), running -> ``cancel_requested``. Returns the state.
    ``source``: who asked (a user by default), recorded on the acknowledging attempt."""

    async def work(c: Conn) -> JobState:
        row = await c.fetchrow(sql.CANCEL_JOB, now, job_id, source.value)
        if row is None:
            current = await c.fetchrow(sql.JOB_HOLDER, job_id)
            if current is None:
                raise NotFoundError(f"no job {job_id}")
            return JobState(current["state"])
        state = JobState(row["state"])
        if state is JobState.CANCEL_REQUESTED:  # its worker stops it at once
            await c.execute(sql.NOTIFY_STOP, channel)
        if state is JobState.CANCELLED:
            closed = Closed(
                id=job_id,
                run_id=row["run_id"],
                name=row["name"],
                critical=row["critical"],
                state=state,
                reason="CANCELLED",
            )
            finished = [row["run_id"]] if row["jobs_open"] == 0 else []
            await settle(
                c, dag=dag, closed=[closed], finished_runs=finished, now=now, channel=channel
            )
        return state

    return await atomically(conn, work)


async def cancel_requested(conn: Conn, job_id: uuid.UUID) -> bool:
    """Whether cancellation of ``job_id`` has been requested (checked at checkpoints)."""
    return bool(await conn.fetchval(sql.CANCEL_REQUESTED, job_id))
