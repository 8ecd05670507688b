"""The job queue API: claim, complete, fail, heartbeat, promote, reap and cancel.

Every function takes an asyncpg connection made by ``streams.adapters.postgres`` (JSONB codecs
installed) and an optional ``now`` (``None``: the database clock) so tests can move time.
Functions that change state run in their own transaction (a savepoint inside a caller's) and
return what happened to the job instead of raising when a guard refused: :class:`Outcome`
``LOST`` means the attempt is no longer this worker's (reaped, cancelled);
``CANCEL_REQUESTED`` means acknowledge it.

Functions that end jobs take ``dag``: the DAG the runtime runs (:class:`~stages.jobs.graph.Dag`,
the worker's), whose specs give a failing job its retry policy and failure reason, whose gates
skip jobs a completed job's capabilities rule out and whose features finalise runs.

Functions that can make jobs runnable take ``channel``: the LISTEN/NOTIFY channel of the
deployment, ``Names(namespace=settings.namespace).jobs_channel`` (see :func:`jobs_channel`).
Runs are created by :func:`streams.jobs.enqueue.enqueue_run`; the reaper lives in
``reaper.py`` and cancellation in ``cancel.py``. All of them are re-exported here, so this module
is the one import for the whole API.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from schemas import error_codes as codes
from stages.jobs.errors import AttemptFailure, ErrorSource, describe
from stages.jobs.gating import capabilities_of
from stages.jobs.graph import Dag
from stages.jobs.job_state import JobState
from stages.jobs.retry import decide
from streams.adapters.postgres import Conn
from streams.config import Settings
from streams.jobs import sql
from streams.jobs.attempts import end_attempt, refusal
from streams.jobs.cancel import CancelSummary, cancel_job, cancel_requested, cancel_run
from streams.jobs.enqueue import EnqueuedRun, enqueue_run, retry_run
from streams.jobs.executor import JobContext
from streams.jobs.job_context import context_from_row
from streams.jobs.model import (
    ClaimedJob,
    Completed,
    FailOutcome,
    FinishedRun,
    JobResult,
    Outcome,
)
from streams.jobs.reaper import Reaped, reap
from streams.jobs.settle import Closed, apply_gating, settle
from streams.jobs.txn import atomically, on_conflict, rollback_quietly
from streams.names import Names

__all__ = [
    "STOP_NOTICE",
    "CancelSummary",
    "EnqueuedRun",
    "Reaped",
    "acknowledge_cancel",
    "cancel_job",
    "cancel_requested",
    "cancel_run",
    "claim",
    "claim_contexts",
    "complete",
    "complete_batch",
    "complete_many",
    "enqueue_run",
    "fail",
    "heartbeat",
    "job_state",
    "jobs_channel",
    "promote",
    "reap",
    "release",
    "retry_run",
]

Now = datetime | None

STOP_NOTICE = sql.STOP_NOTICE
"""The payload of a notification on the jobs channel that running jobs were asked to stop."""


def jobs_channel(settings: Settings) -> str:
    """The NOTIFY channel workers of this deployment listen on."""
    return Names(namespace=settings.namespace).jobs_channel


async def job_state(conn: Conn, job_id: uuid.UUID) -> JobState | None:
    """Where ``job_id`` stands now (``None``: no such job)."""
    state = await conn.fetchval(sql.JOB_STATE, job_id)
    return None if state is None else JobState(state)


async def claim(
    conn: Conn,
    *,
    worker_id: str,
    limit: int,
    tenant_max_running: int,
    heavy_max_running: int,
    pools: Sequence[str] | None = None,
    job_types: Sequence[str] | None = None,
    max_active_runs: int | None = None,
    now: Now = None,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` queued jobs (priority desc, then oldest) in one statement.

    Only jobs of ``pools`` and ``job_types`` (``None``: any) are taken, never more than
    ``tenant_max_running`` running jobs per tenant nor ``heavy_max_running`` heavy jobs in
    total. Claims are serialised by an advisory lock so those limits hold under concurrency.

    A tenant has at most ``max_active_runs`` runs started and unfinished (its own
    ``tenants.max_active_runs`` wins; ``None``: only tenants' own limits); jobs of its further
    runs stay queued and their runs ``pending`` until a place frees up (spec 000 §12).
    """
    rows = await _claim_rows(
        conn, worker_id, limit, tenant_max_running, heavy_max_running, pools, job_types,
        max_active_runs, now,
    )
    return [ClaimedJob.from_row(row) for row in rows]


async def claim_contexts(
    conn: Conn,
    *,
    worker_id: str,
    limit: int,
    tenant_max_running: int,
    heavy_max_running: int,
    pools: Sequence[str] | None = None,
    job_types: Sequence[str] | None = None,
    max_active_runs: int | None = None,
    now: Now = None,
) -> list[JobContext]:
    """Like :func:`claim`, returning each job's :class:`JobContext` (same single statement)."""
    rows = await _claim_rows(
        conn, worker_id, limit, tenant_max_running, heavy_max_running, pools, job_types,
        max_active_runs, now,
    )
    return [context_from_row(row) for row in rows]


async def _claim_rows(
    conn: Conn,
    worker_id: str,
    limit: int,
    tenant_max_running: int,
    heavy_max_running: int,
    pools: Sequence[str] | None,
    job_types: Sequence[str] | None,
    max_active_runs: int | None,
    now: Now,
) -> list[Any]:
    if limit <= 0:
        return []
    args = (
        now,
        limit,
        worker_id,
        _list(pools),
        _list(job_types),
        tenant_max_running,
        heavy_max_running,
        max_active_runs,
    )
    if conn.is_in_transaction():  # the caller's transaction: a savepoint is not needed
        await conn.execute(sql.CLAIM_LOCK)
        return list(await conn.fetch(sql.CLAIM, *args))
    async for attempt in on_conflict():
        with attempt:
            # BEGIN and the lock travel in one message; CLAIM and COMMIT follow: 3 round trips.
            await conn.execute(sql.CLAIM_BEGIN)
            try:
                rows = await conn.fetch(sql.CLAIM, *args)
            except BaseException:
                await rollback_quietly(conn)
                raise
            await conn.execute("COMMIT")
    return list(rows)


async def complete(
    conn: Conn,
    job: ClaimedJob,
    result: JobResult,
    *,
    dag: Dag,
    now: Now = None,
    channel: str,
) -> Outcome:
    """Record ``job``'s success, its datasets and attempt, release dependents - atomically."""
    return (await complete_many(conn, [(job, result)], dag=dag, now=now, channel=channel))[job.id]


async def complete_many(
    conn: Conn,
    items: Sequence[tuple[ClaimedJob, JobResult]],
    *,
    dag: Dag,
    now: Now = None,
    channel: str,
) -> dict[uuid.UUID, Outcome]:
    """Complete several jobs held by one worker in one transaction (group commit).

    For each job: ``succeeded``, its attempt row and dataset rows, its dependents whose
    dependencies are now all finished moved to ``queued`` (or ``skipped``), capability gating
    from its summary, and the run finalised if this was its last open job.
    """
    return dict((await complete_batch(conn, items, dag=dag, now=now, channel=channel)).outcomes)


async def complete_batch(
    conn: Conn,
    items: Sequence[tuple[ClaimedJob, JobResult]],
    *,
    dag: Dag,
    now: Now = None,
    channel: str,
) -> Completed:
    """:func:`complete_many`, also returning the runs the transaction finalised."""
    if not items:
        return Completed(outcomes={})
    worker = items[0][0].locked_by
    if any(job.locked_by != worker for job, _ in items):
        raise ValueError("complete_many: all jobs must be held by the same worker")
    jobs = [
        {
            "id": str(job.id),
            "attempt": job.attempt,
            "output": dict(result.summary),
            "idempotency_key": result.idempotency_key,
            "metrics": dict(result.metrics),
        }
        for job, result in items
    ]
    datasets = [d.as_json(job.id) for job, result in items for d in result.datasets]

    finalised: tuple[FinishedRun, ...] = ()

    async def work(c: Conn) -> set[uuid.UUID]:
        nonlocal finalised
        finalised = ()  # a retried transaction starts over
        row = await c.fetchrow(sql.COMPLETE, now, worker, jobs, datasets, channel)
        assert row is not None
        done = set(row["done"])
        closed = [Closed.from_json(item, JobState.SKIPPED) for item in row["skipped"]]
        finished = set(row["finished_runs"])
        for job, result in items:
            caps = capabilities_of(result.summary)
            if job.id in done and caps:
                gated, ended = await apply_gating(
                    c, dag=dag, run_id=job.run_id, reporter=job.name, capabilities=caps, now=now
                )
                closed.extend(gated)
                if ended:
                    finished.add(job.run_id)
        if closed or finished:
            finalised = await settle(
                c, dag=dag, closed=closed, finished_runs=finished, now=now, channel=channel
            )
        return done

    done = await atomically(conn, work)
    outcomes = {
        job.id: Outcome.APPLIED if job.id in done else await refusal(conn, job) for job, _ in items
    }
    return Completed(outcomes=outcomes, finished_runs=finalised)


async def fail(
    conn: Conn,
    job: ClaimedJob,
    error: AttemptFailure,
    *,
    dag: Dag,
    schedule: Sequence[float],
    u: float,
    timed_out: bool = False,
    now: Now = None,
    channel: str,
) -> FailOutcome:
    """End ``job``'s attempt with ``error``: ``retry_wait`` (after backoff) or ``failed``.

    The job type's policy (spec 000 §9.1) decides: non-retriable codes and exhausted attempts
    fail for good. ``schedule`` is the configured backoff (``Settings.retry.job_backoff_s``)
    unless the type has its own; ``u`` in [0, 1) is the random draw for the jitter.
    """
    spec = dag.spec_of(job.job_type)
    decision = decide(
        code=error.code,
        retriable=error.retriable,
        attempt=job.own_attempt,
        max_attempts=job.max_attempts,
        non_retriable=spec.retry.non_retriable if spec else frozenset(),
        schedule=spec.retry.backoff_s if spec and spec.retry.backoff_s else schedule,
        u=u,
    )
    target = JobState.RETRY_WAIT if decision.retry else JobState.FAILED
    return await atomically(
        conn,
        lambda c: end_attempt(
            c,
            job.id,
            dag=dag,
            worker=job.locked_by,
            attempt=job.attempt,
            expected=JobState.RUNNING,
            target=target,
            delay_s=decision.delay_s if decision.retry else None,
            error=error,
            critical=job.critical,
            attempt_status="timed_out" if timed_out else "failed",
            now=now,
            channel=channel,
        ),
    )


async def release(
    conn: Conn,
    job: ClaimedJob,
    *,
    dag: Dag,
    max_lost: int,
    drain_s: float,
    now: Now = None,
    channel: str,
) -> FailOutcome:
    """A draining worker stopped ``job`` at its deadline: give it back for another worker.

    The attempt is lost to infrastructure, not failed by the job: it counts in ``lost_count``
    and the job is ``retry_wait`` due at once (promoted on the next poll of any worker) -
    unless it has now been lost ``max_lost`` times, when it fails with ``WORKER_DRAINED``.
    The attempt row says ``cancelled`` (the worker stopped it) with ``retry_at`` set.
    """
    losses = job.lost + 1
    retry = losses < max_lost
    error = describe(
        codes.WORKER_DRAINED,
        f"stopped by its draining worker after {drain_s:g}s (lost {losses} of at most "
        f"{max_lost} times)",
        retriable=retry,
        source=ErrorSource.WORKER,
    )
    return await atomically(
        conn,
        lambda c: end_attempt(
            c,
            job.id,
            dag=dag,
            worker=job.locked_by,
            attempt=job.attempt,
            expected=JobState.RUNNING,
            target=JobState.RETRY_WAIT if retry else JobState.FAILED,
            delay_s=0.0 if retry else None,
            error=error,
            critical=job.critical,
            attempt_status="cancelled",
            lost=True,
            now=now,
            channel=channel,
        ),
    )


async def acknowledge_cancel(
    conn: Conn, job: ClaimedJob, *, dag: Dag, now: Now = None, channel: str
) -> FailOutcome:
    """The worker stopped ``job`` at a checkpoint: ``cancel_requested`` -> ``cancelled``."""
    error = describe(
        codes.CANCELLED,
        "stopped at a checkpoint after cancellation was requested",
        retriable=False,
        source=ErrorSource.WORKER,
    )
    return await atomically(
        conn,
        lambda c: end_attempt(
            c,
            job.id,
            dag=dag,
            worker=job.locked_by,
            attempt=job.attempt,
            expected=JobState.CANCEL_REQUESTED,
            target=JobState.CANCELLED,
            delay_s=None,
            error=error,
            critical=job.critical,
            attempt_status="cancelled",
            now=now,
            channel=channel,
        ),
    )


async def heartbeat(
    conn: Conn, *, worker_id: str, jobs: Sequence[ClaimedJob], now: Now = None
) -> dict[uuid.UUID, JobState]:
    """Refresh the heartbeat of ``jobs``; returns the ones still held and their state.

    A job missing from the answer is lost (reaped or re-claimed); ``cancel_requested`` means
    the worker should stop it at the next checkpoint.
    """
    if not jobs:
        return {}
    rows = await conn.fetch(
        sql.HEARTBEAT, now, worker_id, [j.id for j in jobs], [j.attempt for j in jobs]
    )
    return {row["id"]: JobState(row["state"]) for row in rows}


async def promote(conn: Conn, *, now: Now = None, channel: str) -> int:
    """Move ``retry_wait`` jobs whose time has come to ``queued``; returns how many."""
    row = await conn.fetchrow(sql.PROMOTE, now, channel)
    assert row is not None
    return int(row["promoted"])


def _list(values: Sequence[str] | None) -> list[str] | None:
    return None if values is None else list(values)
