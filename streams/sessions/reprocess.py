"""Reprocess, backfill and rollback: blue/green processing runs (spec 000 §13, spec 003).

A session's runs are immutable, and so are their datasets; what moves is one pointer,
``sessions.active_run_id``, which the API, the CLI and ClickHouse readers follow.

- :func:`reprocess` starts a new run over the same artifacts with the *current* versions
  (and the source run's config unless another is given; the tenant's saved tracks are stamped
  into a config without ``tracks``, :mod:`streams.sessions.saved_tracks`). Nothing changes for
  readers until the new run ends: the engine moves the pointer when - and only when - it ends
  succeeded or partial and is newer than the active run. A failed or cancelled reprocess leaves
  the session as it was.
- :func:`backfill` reprocesses many sessions (by tenant, device, upload time) with the current
  versions, at a priority below interactive uploads. It is idempotent: a session that already
  has a run at the current versions with its config and artifacts - whatever became of that
  run - gets no second one (checked under the session's row lock, so two backfills running at
  once cannot both start one). A failed or cancelled backfill run is retried, and resumed, with
  ``tideway runs retry`` (``streams.sessions.resume``).
- :func:`rollback` moves the pointer back to the newest earlier run that ended succeeded or
  partial (or to a named one). Old runs and their datasets stay for audit and for rolling
  forward again (until retention removes a superseded run's outputs after
  ``retention.superseded_runs_s``: such a run is never made active again, see
  ``streams.retention.batch``); every move is appended to ``sessions.metadata.pointer_history``.
  Before the pointer moves, every dataset of the run it would point at is read back and
  checked against its sha256 (spec 003's health check before a flip, the objects half of
  ``publish_session``'s: :func:`streams.sessions.verify.verify_objects`); a file missing or
  changed since refuses the rollback (``ROLLBACK_VERIFICATION_FAILED``) and nothing moves.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from schemas import error_codes as codes
from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.planner import plan_run
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS
from streams.errors import NotFoundError, UsageError
from streams.jobs.enqueue import EnqueuedRun, enqueue_run
from streams.names import Names
from streams.objects import ObjectStore
from streams.sessions import priorities
from streams.sessions.saved_tracks import stamp_saved_tracks
from streams.sessions.verify import DatasetToCheck, verify_objects
from streams.sessions.versions import current_versions

__all__ = [
    "BACKFILL_PRIORITY",
    "BackfillItem",
    "BackfillScope",
    "Rollback",
    "backfill",
    "promote",
    "reprocess",
    "rollback",
]

log = logging.getLogger(__name__)

_GOOD: Final = ("succeeded", "partial")

BACKFILL_PRIORITY: Final = priorities.BACKFILL
"""Backfill runs' default priority: below interactive uploads and reprocesses."""

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

# A run of the session at these versions ($2-$4) over the same artifacts and config as the
# run a reprocess would start from ($5, $6): such a session is already current.
_CURRENT_RUN = """
SELECT r.id FROM processing_runs r
WHERE r.session_id = $1 AND r.parser_version = $2 AND r.pipeline_version = $3
  AND r.fusion_version IS NOT DISTINCT FROM $4
  AND r.artifact_set_hash = $5 AND r.config = $6::jsonb
ORDER BY r.created_at DESC
LIMIT 1
"""

# Backfill candidates: sessions by tenant ($1), device ($2) and upload time [$3, $4), oldest
# first, with the run a reprocess starts from and any run already at the versions $5-$7.
_BACKFILL_SESSIONS = """
SELECT s.id, t.name AS tenant, d.external_id AS device, s.created_at,
       src.id AS source_run, cur.id AS current_run, cur.status AS current_status
FROM sessions s
JOIN tenants t ON t.id = s.tenant_id
JOIN devices d ON d.id = s.device_id
LEFT JOIN LATERAL (
    SELECT r.id, r.config, r.artifact_set_hash FROM processing_runs r
    WHERE r.session_id = s.id
    ORDER BY (r.id = s.active_run_id) DESC, r.created_at DESC
    LIMIT 1
) src ON true
LEFT JOIN LATERAL (
    SELECT r.id, r.status FROM processing_runs r
    WHERE r.session_id = s.id AND r.parser_version = $5 AND r.pipeline_version = $6
      AND r.fusion_version IS NOT DISTINCT FROM $7
      AND r.artifact_set_hash = src.artifact_set_hash AND r.config = src.config
    ORDER BY r.created_at DESC
    LIMIT 1
) cur ON true
WHERE ($1::text IS NULL OR t.name = $1) AND ($2::text IS NULL OR d.external_id = $2)
  AND ($3::timestamptz IS NULL OR s.created_at >= $3)
  AND ($4::timestamptz IS NULL OR s.created_at < $4)
ORDER BY s.created_at, s.id
LIMIT $8
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

# What a rollback reads back before the pointer moves: every dataset the run recorded.
_RUN_DATASETS = """
SELECT name, storage_url, content_hash, coalesce(row_count, 0) AS row_count
FROM derived_datasets WHERE run_id = $1
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
class BackfillScope:
    """Which sessions a backfill covers: every filter given must match (``None``: any)."""

    tenant: str | None = None
    device: str | None = None
    since: datetime | None = None  # uploaded at or after
    until: datetime | None = None  # uploaded before
    limit: int | None = None


BackfillAction = Literal["started", "would_start", "current", "no_run"]


@dataclass(frozen=True, kw_only=True)
class BackfillItem:
    """One session of a backfill and what became of it.

    ``action``: ``started`` (``run_id`` is the new run), ``would_start`` (dry run), ``current``
    (``run_id`` is the run already at the current versions, in state ``status``) or
    ``no_run`` (the session has no run to reprocess from).
    """

    session_id: uuid.UUID
    tenant: str
    device: str
    uploaded_at: datetime
    action: BackfillAction
    run_id: uuid.UUID | None = None
    status: str | None = None


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
    action: Literal["reprocess", "backfill"] = "reprocess",
    unless_current: bool = False,
) -> EnqueuedRun:
    """Start a new run of ``session_id`` with the current versions (blue/green, see above).

    ``unless_current``: when the session already has a run at the current versions with the
    same config and artifacts, start nothing and return that run (``created=False``). The
    new run's ``run.pending`` is written with it (:mod:`streams.domain_events`)."""
    versions = current_versions()
    async with conn.transaction():
        session = await conn.fetchrow(_SESSION, session_id, tenant)
        if session is None:
            raise NotFoundError(f"no session {session_id} for tenant {tenant}")
        source = await conn.fetchrow(_SOURCE_RUN, session_id, session["active_run_id"])
        if source is None:
            raise UsageError(f"session {session_id} has no run to reprocess",
                             code="NO_PREVIOUS_RUN")
        run_config = await stamp_saved_tracks(
            conn, session["tenant_id"], source["config"] if config is None else config)
        if unless_current:
            existing = await conn.fetchval(
                _CURRENT_RUN,
                session_id,
                versions.parser,
                versions.pipeline,
                versions.fusion,
                source["artifact_set_hash"],
                run_config,
            )
            if existing is not None:
                return EnqueuedRun(run_id=existing, created=False)
        enqueued = await enqueue_run(
            conn,
            dag=DEFAULT_DAG,
            tenant_id=session["tenant_id"],
            session_id=session_id,
            plan=plan_run(run_config, default_attempts=default_attempts),
            config=run_config,
            versions=versions,
            artifact_ids=list(source["artifact_ids"]),
            artifact_set_hash=source["artifact_set_hash"],
            priority=priorities.REPROCESS if priority is None else priority,
            requested_by=f"{action}:{requested_by}",
            channel=Names(namespace=namespace).jobs_channel,
        )
        await conn.execute(
            _NOTE,
            session_id,
            {
                "action": action,
                "run_id": str(enqueued.run_id),
                "from_run": str(source["id"]),
                "by": requested_by,
            },
        )
    return enqueued


async def backfill(
    conn: Any,
    scope: BackfillScope,
    *,
    dry_run: bool = False,
    priority: int = BACKFILL_PRIORITY,
    requested_by: str = "operator",
    namespace: str = "",
    default_attempts: int = DEFAULT_MAX_ATTEMPTS,
    on_item: Callable[[BackfillItem, int, int], None] | None = None,
) -> list[BackfillItem]:
    """Reprocess every session of ``scope`` not yet at the current versions (see above).

    ``on_item(item, done, total)`` is called after each session (progress)."""
    versions = current_versions()
    rows = await conn.fetch(
        _BACKFILL_SESSIONS,
        scope.tenant,
        scope.device,
        scope.since,
        scope.until,
        versions.parser,
        versions.pipeline,
        versions.fusion,
        scope.limit,
    )
    items: list[BackfillItem] = []
    for row in rows:
        base = {
            "session_id": row["id"],
            "tenant": row["tenant"],
            "device": row["device"],
            "uploaded_at": row["created_at"],
        }
        if row["source_run"] is None:
            item = BackfillItem(**base, action="no_run")
        elif row["current_run"] is not None:
            item = BackfillItem(
                **base, action="current", run_id=row["current_run"], status=row["current_status"]
            )
        elif dry_run:
            item = BackfillItem(**base, action="would_start")
        else:
            # Checked again under the session's lock: another backfill may have just started it.
            run = await reprocess(
                conn,
                tenant=row["tenant"],
                session_id=row["id"],
                requested_by=requested_by,
                priority=priority,
                namespace=namespace,
                default_attempts=default_attempts,
                action="backfill",
                unless_current=True,
            )
            item = BackfillItem(
                **base,
                action="started" if run.created else "current",
                run_id=run.run_id,
                status="pending" if run.created else None,
            )
        items.append(item)
        if on_item is not None:
            on_item(item, len(items), len(rows))
    return items


async def rollback(
    conn: Any,
    *,
    tenant: str,
    session_id: uuid.UUID,
    to_run: uuid.UUID | None = None,
    requested_by: str = "operator",
    store: ObjectStore,
    action: Literal["rollback", "promote"] = "rollback",
) -> Rollback:
    """Point ``session_id`` back at the previous good run (or at ``to_run``), once every dataset
    of that run has been read back from ``store`` and matched its sha256 (module docstring).

    Refusals change nothing: ``NO_PREVIOUS_RUN``, ``RUN_OUTPUTS_REMOVED``,
    ``ROLLBACK_VERIFICATION_FAILED`` (:class:`UsageError`); a store that cannot be read raises
    its ``TransientError``."""
    async with conn.transaction():
        session = await conn.fetchrow(_SESSION, session_id, tenant)
        if session is None:
            raise NotFoundError(f"no session {session_id} for tenant {tenant}")
        current = session["active_run_id"]
        if current is None:
            raise UsageError(f"session {session_id} has no active run to roll back from",
                             code="NO_PREVIOUS_RUN")
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
        # Checked while the session row is held, so the run verified is the run pointed at and
        # retention (which holds the row to mark a run) cannot start removing it in between.
        # The check takes as long as reading the run's files (a fraction of a second for an
        # hour's session on a local disk); only this session's pointer waits meanwhile.
        await _verify_outputs(conn, store, to_run)
        await conn.execute(
            _MOVE,
            session_id,
            to_run,
            {
                "action": action,
                "from_run": str(current),
                "run_id": str(to_run),
                "by": requested_by,
            },
        )
    return Rollback(session_id=session_id, from_run=current, to_run=to_run)


_SESSION_OF_RUN = """
SELECT r.session_id FROM processing_runs r JOIN tenants t ON t.id = r.tenant_id
WHERE r.id = $1 AND t.name = $2
"""


async def promote(conn: Any, *, tenant: str, run_id: uuid.UUID, requested_by: str = "operator",
                  store: ObjectStore) -> Rollback:
    """Make ``run_id`` its session's active run - a run the drift gate held back
    (``summary.drift``), say - once its datasets read back with their sha256, as a rollback to
    it does (``pointer_history`` notes a ``promote``)."""
    session_id = await conn.fetchval(_SESSION_OF_RUN, run_id, tenant)
    if session_id is None:
        raise NotFoundError(f"no run {run_id} for tenant {tenant}")
    return await rollback(conn, tenant=tenant, session_id=session_id, to_run=run_id,
                          requested_by=requested_by, store=store, action="promote")


async def _verify_outputs(conn: Any, store: ObjectStore, run_id: uuid.UUID) -> None:
    """Raise ``ROLLBACK_VERIFICATION_FAILED`` unless every dataset of ``run_id`` reads back
    from ``store`` with its recorded sha256."""
    rows = await conn.fetch(_RUN_DATASETS, run_id)
    report = await verify_objects(
        store,
        [
            DatasetToCheck(
                name=r["name"], url=r["storage_url"], sha256=r["content_hash"], rows=r["row_count"]
            )
            for r in rows
        ],
    )
    if report.ok:
        return
    log.warning("rollback to run %s refused: %s", run_id, "; ".join(report.problems))
    shown = "; ".join(report.problems[:5])
    more = f" (+{len(report.problems) - 5} more)" if len(report.problems) > 5 else ""
    raise UsageError(
        f"run {run_id} cannot be made active: {len(report.problems)} of its {report.datasets}"
        f" datasets are missing or do not match their sha256 ({shown}{more}); the pointer was"
        " not moved - reprocess the session instead",
        code=codes.ROLLBACK_VERIFICATION_FAILED,
    )
