"""An operator's run actions - cancel, retry.

``tideway runs cancel|retry`` and ``POST /v1/runs/{id}/cancel|retry`` both call these. The
change is made by the job engine (:mod:`streams.jobs.queue`, its own transaction); its
``run.cancelled`` or the new run's ``run.pending`` is written by the database in that same
transaction (:mod:`streams.domain_events`), so a run changed from the command line shows up
live in the console like one changed from it. Both run the standard DAG unless given another.
"""

from __future__ import annotations

import uuid

from stages.jobs.dag import DEFAULT_DAG, Dag
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS
from streams.adapters.postgres import Conn
from streams.jobs import queue

__all__ = ["cancel_run", "retry_run"]


async def cancel_run(
    conn: Conn, run_id: uuid.UUID, *, channel: str, dag: Dag = DEFAULT_DAG
) -> queue.CancelSummary:
    """Cancel ``run_id`` (:func:`streams.jobs.queue.cancel_run`).

    The workers running its jobs are woken on the deployment's jobs ``channel``, so they stop
    them at once rather than at their next heartbeat."""
    return await queue.cancel_run(conn, run_id, dag=dag, channel=channel)


async def retry_run(
    conn: Conn,
    run_id: uuid.UUID,
    *,
    requested_by: str,
    channel: str,
    default_attempts: int = DEFAULT_MAX_ATTEMPTS,
    dag: Dag = DEFAULT_DAG,
) -> queue.EnqueuedRun:
    """Start a run repeating ``run_id`` (:func:`streams.jobs.queue.retry_run`; nothing new
    when an identical retry already existed)."""
    return await queue.retry_run(
        conn, run_id, dag=dag, requested_by=requested_by, channel=channel,
        default_attempts=default_attempts,
    )  # fmt: skip
