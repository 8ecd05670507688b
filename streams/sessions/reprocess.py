"""Reprocess and rollback: blue/green processing runs of one session (spec 000 §13, spec 003).

A session's runs are immutable, and so are their datasets; what moves is one pointer,
``sessions.active_run_id``, which the API, the CLI and ClickHouse readers follow.

- :func:`reprocess` starts a new run over the same artifacts with the *current* versions
  (and the source run's config unless another is given). Nothing changes for readers until the
  new run ends: the engine moves the pointer when - and only when - it ends succeeded or partial
  and is newer than the active run. A failed or cancelled reprocess leaves the session as it was.
- :func:`rollback` moves the pointer back to the newest earlier run that ended succeeded or
  partial (or to a named one). Old runs and their datasets stay for audit and for rolling
  forward again (until retention removes a superseded run's outputs after
  ``retention.superseded_runs_s``: such a run is never made active again, see
  ``streams.retention.batch``); every move is appended to ``sessions.metadata.pointer_history``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from stages.jobs.planner import plan_run
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS
from streams.errors import NotFoundError, UsageError
from streams.jobs.enqueue import EnqueuedRun, enqueue_run
from streams.names import Names
from streams.sessions.versions import current_versions

__all__ = ["Rollback", "reprocess", "rollback"]

_GOOD: Final = ("succeeded", "partial")

_SESSION = """
SELECT s.id, s.tenant_id, s.active_run_id
FROM sessions s JOIN tenants t ON t.id = s.tenant_id
WHERE s.id = $1 AND t.name = $2
FOR UPDATE OF s
"""

# The run a reprocess starts from: the active one, else the newest.
_SOURCE_RUN = """
SELECT r.id, r.artifact_set_hash, r.config, r.priority,
       array(SELECT artifact_id FROM run_artifacts ra WHERE ra.run_id = r.id
             ORDER BY ra.position) AS artifact_ids
FROM processing_runs r
WHERE r.session_id = $1
ORDER BY (r.id = $2) DESC, r.created_at DESC
LIMIT 1
"""

_PREVIOUS_GOOD = """
SELECT r.id FROM processing_runs r
WHERE r.session_id = $1 AND r.status = ANY($3::text[]) AND r.id <> $2
  AND r.outputs_removed_at IS NULL
  AND r.created_at <= (SELECT created_at FROM processing_runs WHERE id = $2)
ORDER BY r.created_at DESC, r.id DESC
LIMIT 1
"""

_RUN_OF_SESSION = """
SELECT status, outputs_removed_at FROM processing_runs WHERE id = $1 AND session_id = $2
"""

_MOVE = """
UPDATE sessions
SET active_run_id = $2, status = 'ready', query_ready = true, updated_at = now(),
    metadata = jsonb_set(metadata, '{pointer_history}',
        coalesce(metadata -> 'pointer_history', '[]'::jsonb)
        || jsonb_build_array($3::jsonb || jsonb_build_object('at', now())))
WHERE id = $1
"""

_NOTE = """
UPDATE sessions
SET metadata = jsonb_set(metadata, '{pointer_history}',
        coalesce(metadata -> 'pointer_history', '[]'::jsonb)
        || jsonb_build_array($2::jsonb || jsonb_build_object('at', now())))
WHERE id = $1
"""


@dataclass(frozen=True, kw_only=True)
class Rollback:
    """Where the pointer was and where it is now."""

    session_id: uuid.UUID
    from_run: uuid.UUID
    to_run: uuid.UUID


async def reprocess(
    conn: Any,
    *,
    tenant: str,
    session_id: uuid.UUID,
    requested_by: str = "operator",
    config: Mapping[str, Any] | None = None,
    priority: int | None = None,
    namespace: str = "",
    default_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> EnqueuedRun:
    """Start a new run of ``session_id`` with the current versions (blue/green, see above)."""
    async with conn.transaction():
        session = await conn.fetchrow(_SESSION, session_id, tenant)
        if session is None:
            raise NotFoundError(f"no session {session_id} for tenant {tenant}")
        source = await conn.fetchrow(_SOURCE_RUN, session_id, session["active_run_id"])
        if source is None:
            raise UsageError(f"session {session_id} has no run to reprocess")
        run_config = dict(source["config"] if config is None else config)
        enqueued = await enqueue_run(
            conn,
            tenant_id=session["tenant_id"],
            session_id=session_id,
            plan=plan_run(run_config, default_attempts=default_attempts),
            config=run_config,
            versions=current_versions(),
            artifact_ids=list(source["artifact_ids"]),
            artifact_set_hash=source["artifact_set_hash"],
            priority=source["priority"] if priority is None else priority,
            requested_by=f"reprocess:{requested_by}",
            channel=Names(namespace=namespace).jobs_channel,
        )
        await conn.execute(
            _NOTE,
            session_id,
            {
                "action": "reprocess",
                "run_id": str(enqueued.run_id),
                "from_run": str(source["id"]),
                "by": requested_by,
            },
        )
    return enqueued


async def rollback(
    conn: Any,
    *,
    tenant: str,
    session_id: uuid.UUID,
    to_run: uuid.UUID | None = None,
    requested_by: str = "operator",
) -> Rollback:
    """Point ``session_id`` back at the previous good run (or at ``to_run``)."""
    async with conn.transaction():
        session = await conn.fetchrow(_SESSION, session_id, tenant)
        if session is None:
            raise NotFoundError(f"no session {session_id} for tenant {tenant}")
        current = session["active_run_id"]
        if current is None:
            raise UsageError(f"session {session_id} has no active run to roll back from")
        if to_run is None:
            to_run = await conn.fetchval(_PREVIOUS_GOOD, session_id, current, list(_GOOD))
            if to_run is None:
                raise UsageError(
                    f"session {session_id} has no earlier succeeded or partial run",
                    code="NO_PREVIOUS_RUN",
                )
        else:
            found = await conn.fetchrow(_RUN_OF_SESSION, to_run, session_id)
            if found is None:
                raise NotFoundError(f"run {to_run} is not a run of session {session_id}")
            if found["status"] not in _GOOD:
                raise UsageError(f"run {to_run} is {found['status']}; only good runs can be active")
            if found["outputs_removed_at"] is not None:
                raise UsageError(
                    f"run {to_run}'s datasets were removed by retention"
                    f" ({found['outputs_removed_at']:%Y-%m-%d %H:%M} UTC); reprocess instead",
                    code="RUN_OUTPUTS_REMOVED",
                )
        await conn.execute(
            _MOVE,
            session_id,
            to_run,
            {
                "action": "rollback",
                "from_run": str(current),
                "run_id": str(to_run),
                "by": requested_by,
            },
        )
    return Rollback(session_id=session_id, from_run=current, to_run=to_run)
