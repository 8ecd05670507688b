"""The reaper: take back jobs whose worker went silent or overran its hard timeout."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas import error_codes as codes
from stages.jobs.errors import ErrorSource, describe
from stages.jobs.job_state import JobState
from stages.jobs.retry import decide
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
    stale_after_s: float,
    schedule: Sequence[float],
    rand: Callable[[], float],
    limit: int = 100,
    now: Now = None,
    channel: str,
) -> list[Reaped]:
    """Take back jobs whose worker stopped heartbeating or that passed their hard timeout.

    A running job becomes ``retry_wait`` (``WORKER_LOST`` / ``HARD_TIMEOUT``, retriable) or
    ``failed`` when its attempts are exhausted; a ``cancel_requested`` one becomes
    ``cancelled``. Rows are locked ``FOR UPDATE SKIP LOCKED`` and every update names the
    state, holder and attempt it expects, so a job that completed meanwhile is never touched.
    """

    async def work(c: Conn) -> list[Reaped]:
        reaped: list[Reaped] = []
        for row in await c.fetch(sql.REAP_CANDIDATES, now, stale_after_s, limit):
            previous = JobState(row["state"])
            if previous is JobState.CANCEL_REQUESTED:
                code, target, status = codes.CANCELLED, JobState.CANCELLED, "cancelled"
                error = describe(
                    code,
                    "worker lost after cancellation was requested",
                    retriable=False,
                    source=ErrorSource.REAPER,
                )
                delay: float | None = None
            else:
                hard = bool(row["hard_timed_out"])
                code = codes.HARD_TIMEOUT if hard else codes.WORKER_LOST
                status = "timed_out" if hard else "failed"
                message = (
                    "hard timeout passed"
                    if hard
                    else f"no heartbeat for {stale_after_s:g}s from {row['locked_by']}"
                )
                error = describe(code, message, retriable=True, source=ErrorSource.REAPER)
                decision = decide(
                    code=code,
                    retriable=True,
                    attempt=row["attempt_count"],
                    max_attempts=row["max_attempts"],
                    non_retriable=frozenset(),
                    schedule=schedule,
                    u=rand(),
                )
                target = JobState.RETRY_WAIT if decision.retry else JobState.FAILED
                delay = decision.delay_s if decision.retry else None
            result = await end_attempt(
                c,
                row["id"],
                worker=row["locked_by"],
                attempt=row["attempt_count"],
                expected=previous,
                target=target,
                delay_s=delay,
                error=error,
                critical=row["critical"],
                attempt_status=status,
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
