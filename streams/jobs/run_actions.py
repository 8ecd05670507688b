"""An operator's run actions - cancel, retry - each announced once committed.

``tideway runs cancel|retry`` and ``POST /v1/runs/{id}/cancel|retry`` both call these, so a
run changed from the command line shows up live in the console like one changed from it: the
change is made by the job engine (:mod:`streams.jobs.queue`, its own transaction), then
``run.cancelled`` or the new run's ``run.pending`` is published
(:mod:`streams.domain_events`; an event that cannot be published is logged, never a failure of
the action).
"""

from __future__ import annotations

import uuid

from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS
from streams.adapters.postgres import Conn
from streams.domain_events import DomainEvents
from streams.jobs import queue

__all__ = ["cancel_run", "retry_run"]


async def cancel_run(conn: Conn, run_id: uuid.UUID, *, events: DomainEvents) -> queue.CancelSummary:
    """Cancel ``run_id`` (:func:`streams.jobs.queue.cancel_run`), then announce its state.

    The workers running its jobs are woken on the deployment's jobs channel, so they stop
    them at once rather than at their next heartbeat."""
    done = await queue.cancel_run(conn, run_id, channel=events.names.jobs_channel)
    await events.runs_changed(conn, {run_id: done.status.value})
    return done


async def retry_run(
    conn: Conn,
    run_id: uuid.UUID,
    *,
    events: DomainEvents,
    requested_by: str,
    channel: str,
    default_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> queue.EnqueuedRun:
    """Start a run repeating ``run_id`` (:func:`streams.jobs.queue.retry_run`), then announce
    it as ``run.pending`` (nothing when an identical retry already existed)."""
    new = await queue.retry_run(
        conn, run_id, requested_by=requested_by, channel=channel,
        default_attempts=default_attempts,
    )  # fmt: skip
    if new.created:
        await events.runs_changed(conn, {new.run_id: "pending"})
    return new
