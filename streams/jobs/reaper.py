"""The reaper: take back jobs whose worker went silent or overran its hard timeout."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas import error_codes as codes
from stages.jobs.errors import ErrorSource, describe
from stages.jobs.graph import Dag
from stages.jobs.job_state import JobState
from stages.jobs.retry import DEFAULT_MAX_LOST, decide
from streams.adapters.postgres import Conn
from streams.jobs import sql
from streams.jobs.attempts import end_attempt
from streams.jobs.model import FinishedRun, Outcome
from streams.jobs.txn import atomically

Now = datetime | None


@dataclass(frozen=True, kw_only=True)
class Reaped:
    """One job the reaper took back from a silent or overdue worker."""

    job_id: uuid.UUID
    run_id: uuid.UUID
    name: str
    job_type: str
    worker: str
    previous: JobState
    state: JobState
    code: str
    finished_runs: tuple[FinishedRun, ...] = ()
    """Runs that taking this job back finalised."""


async def reap(
    conn: Conn,
    *,
    dag: Dag,
    stale_after_s: float | None = None,
    max_lost: int = DEFAULT_MAX_LOST,
    schedule: Sequence[float],
    rand: Callable[[], float],
    limit: int = 100,
    now: Now = None,
    channel: str,
) -> list[Reaped]:
    """Take back jobs whose worker stopped heartbeating or that passed their hard timeout.

    ``stale_after_s``: ``None`` uses each job's own threshold (its type's, spec 000 §5.3).
    A job whose worker went silent lost that attempt to infrastructure (a kill -9, an OOM kill,
    a node gone): it is counted in ``lost_count``, not against the job's own attempts, and
    queued again at once - until it has been lost ``max_lost`` times, when it fails with
    ``WORKER_LOST`` (a job that kills every worker it runs on must not loop for ever). A job
    past its hard timeout used up one of its own attempts: ``retry_wait`` after the backoff
    (``HARD_TIMEOUT``) or ``failed`` when they are exhausted. A ``cancel_requested`` job
    becomes ``cancelled``. Rows are locked ``FOR UPDATE SKIP LOCKED`` and every update names
    the state, holder and attempt it expects, so a job that completed meanwhile is never
    touched.
    """

    async def work(c: Conn) -> list[Reaped]:
        reaped: list[Reaped] = []
        for row in await c.fetch(sql.REAP_CANDIDATES, now, stale_after_s, limit):
            previous = JobState(row["state"])
            lost = False
            if previous is JobState.CANCEL_REQUESTED:
                code, target, status = codes.CANCELLED, JobState.CANCELLED, "cancelled"
                error = describe(
                    code,
                    "worker lost after cancellation was requested",
                    retriable=False,
                    source=ErrorSource.REAPER,
                )
                delay: float | None = None
            elif row["hard_timed_out"]:
                code, status = codes.HARD_TIMEOUT, "timed_out"
                error = describe(
                    code, "hard timeout passed", retriable=True, source=ErrorSource.REAPER
                )
                decision = decide(
                    code=code,
                    retriable=True,
                    attempt=row["attempt_count"] - row["lost_count"],
                    max_attempts=row["max_attempts"],
                    non_retriable=frozenset(),
                    schedule=schedule,
                    u=rand(),
                )
                target = JobState.RETRY_WAIT if decision.retry else JobState.FAILED
                delay = decision.delay_s if decision.retry else None
            else:
                code, status, lost = codes.WORKER_LOST, "failed", True
                losses = row["lost_count"] + 1
                error = describe(
                    code,
                    f"no heartbeat for {row['stale_after_s']:g}s from {row['locked_by']} "
                    f"(lost {losses} of at most {max_lost} times)",
                    retriable=losses < max_lost,
                    source=ErrorSource.REAPER,
                )
                target = JobState.RETRY_WAIT if losses < max_lost else JobState.FAILED
                delay = 0.0 if target is JobState.RETRY_WAIT else None
            result = await end_attempt(
                c,
                row["id"],
                dag=dag,
                worker=row["locked_by"],
                attempt=row["attempt_count"],
                expected=previous,
                target=target,
                delay_s=delay,
                error=error,
                critical=row["critical"],
                attempt_status=status,
                lost=lost,
                now=now,
                channel=channel,
            )
            if result.outcome is Outcome.APPLIED:
                reaped.append(
                    Reaped(
                        job_id=row["id"],
                        run_id=row["run_id"],
                        name=row["name"],
                        job_type=row["job_type"],
                        worker=row["locked_by"],
                        previous=previous,
                        state=target,
                        code=code,
                        finished_runs=result.finished_runs,
                    )
                )
        return reaped

    return await atomically(conn, work)
