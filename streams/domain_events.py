"""Domain events on NATS: what happened to a tenant's sessions and runs, for live views.

Subjects (``streams.names``, namespaced like every other)::

    events.<tenant>.session.published    publish_session wrote the run's summary
    events.<tenant>.run.<state>          a run changed state: pending (created by an upload,
                                         a retry, a reprocess or a backfill), running (a
                                         worker claimed its first job), cancelled,
                                         succeeded, partial, failed

The body is JSON: ``{"type": "run.succeeded", "tenant", "run_id", "session_id", "status",
"at"}``. ``GET /v1/events`` streams a tenant's events to browsers (server-sent events).

Theory of operation. Events are *hints* for live views, not a record: they go on core NATS
(at most once, no stream to provision, nothing retained), each published after the change it
announces is committed - except ``session.published``, sent by the publish job once the summary
is written, an instant before the same completion transaction moves the session's pointer (the
``run.succeeded``/``run.partial`` that follows is sent after that commit). A view that missed an
event, or needs the state for certain, reads the resource: the API is the source of truth.
Publishing never fails the work it reports on: an unreachable NATS is logged and the event lost.

Every way a run changes state announces it, from the code that commits the change rather than
from each caller: run creation by intake (``streams.sessions.intake``) and by reprocess and
backfill (``streams.sessions.reprocess``), cancel and retry (``streams.jobs.run_actions``,
which ``tideway runs cancel|retry`` and the API both call), a run's start and end in the worker
(``streams.jobs.worker``). A run's start costs no statement on the claim path: the claim
stamps the run's ``started_at`` with the same instant as the claimed jobs' ``locked_at``, so
one lookup per claimed batch, in the background after the claim commits
(:meth:`DomainEvents.runs_started_soon`), finds the runs that claim started.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from streams.adapters.nats import ONE_SHOT_ATTEMPTS, Nats, connect_nats
from streams.config import Settings
from streams.names import Names

__all__ = ["DomainEvents", "event_body", "session_published"]

log = logging.getLogger(__name__)

_CONNECT_S: Final = 2.0  # an event is not worth waiting longer for NATS

# The tenant and session of each run (for the subjects and bodies of run events).
_RUNS: Final = """
SELECT r.id, r.session_id, t.name AS tenant
FROM processing_runs r JOIN tenants t ON t.id = r.tenant_id
WHERE r.id = ANY($1::uuid[])
"""

# Of runs whose jobs a claim took at $2 (each job's locked_at), those that claim started: the
# claim sets a pending run's started_at to the same instant (streams.jobs.sql.CLAIM).
_STARTED: Final = """
SELECT r.id, r.session_id, t.name AS tenant
FROM unnest($1::uuid[], $2::timestamptz[]) AS c(id, at)
JOIN processing_runs r ON r.id = c.id AND r.started_at = c.at
JOIN tenants t ON t.id = r.tenant_id
"""

_TENANT: Final = "SELECT name FROM tenants WHERE id = $1"


def event_body(kind: str, tenant: str, **fields: Any) -> bytes:
    """The JSON body of an event of ``kind`` (``run.cancelled``...)."""
    body = {"type": kind, "tenant": tenant, **fields, "at": datetime.now(UTC).isoformat()}
    return orjson.dumps(body, default=str)


class DomainEvents:
    """Publishes a process's domain events on a NATS connection it is given, or opens one
    on first use (and closes it in :meth:`aclose`)."""

    def __init__(self, settings: Settings, *, nc: Nats | None = None) -> None:
        self._settings = settings
        self._names = Names(namespace=settings.namespace)
        self._nc = nc
        self._owned = nc is None
        self._pending: set[asyncio.Task[None]] = set()
        self._connecting = asyncio.Lock()

    @property
    def names(self) -> Names:
        """The resource names of the deployment whose events these are."""
        return self._names

    async def _client(self) -> Nats:
        async with self._connecting:  # background events may ask at once: one connection
            if self._nc is None:
                async with asyncio.timeout(_CONNECT_S):
                    self._nc = await connect_nats(
                        self._settings.nats, name="tideway-events", attempts=ONE_SHOT_ATTEMPTS
                    )
        return self._nc

    async def publish(self, tenant: str, kind: str, **fields: Any) -> None:
        """Publish one event (logged and dropped when NATS cannot take it)."""
        try:
            nc = await self._client()
            await nc.publish(
                self._names.event_subject(tenant, kind), event_body(kind, tenant, **fields)
            )
            if self._owned:
                await nc.flush(timeout=int(_CONNECT_S))
        except Exception as exc:  # an event must never fail the work it reports on
            log.warning("domain event %s for %s not published: %s", kind, tenant, exc)

    async def runs_changed(self, db: Any, runs: Mapping[uuid.UUID, str]) -> None:
        """Publish ``run.<state>`` for each run of ``runs`` (run id -> its new state), once
        the change is committed; ``db`` (a pool or a connection) finds their tenants."""
        if not runs:
            return
        try:
            rows = await db.fetch(_RUNS, list(runs))
        except Exception as exc:
            log.warning("run events not published: %s", exc)
            return
        await self._publish_runs(rows, runs)

    async def runs_started(self, db: Any, claimed: Mapping[uuid.UUID, datetime]) -> None:
        """Publish ``run.running`` for the runs a claim started: ``claimed`` maps each run
        whose jobs the claim took to their ``locked_at`` (see the module docstring)."""
        if not claimed:
            return
        try:
            rows = await db.fetch(_STARTED, list(claimed), list(claimed.values()))
        except Exception as exc:
            log.warning("run.running events not published: %s", exc)
            return
        await self._publish_runs(rows, dict.fromkeys(claimed, "running"))

    async def _publish_runs(self, rows: Sequence[Any], runs: Mapping[uuid.UUID, str]) -> None:
        for row in rows:
            status = runs[row["id"]]
            await self.publish(
                row["tenant"],
                f"run.{status}",
                run_id=row["id"],
                session_id=row["session_id"],
                status=status,
            )

    def runs_changed_soon(self, pool: Any, runs: Sequence[tuple[uuid.UUID, str]]) -> None:
        """:meth:`runs_changed` in the background (for callers that must not wait on NATS);
        :meth:`aclose` waits for it."""
        if runs:
            self._background(self.runs_changed(pool, dict(runs)))

    def runs_started_soon(self, pool: Any, claimed: Mapping[uuid.UUID, datetime]) -> None:
        """:meth:`runs_started` in the background (the worker's claim loop does not wait)."""
        if claimed:
            self._background(self.runs_started(pool, dict(claimed)))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def aclose(self) -> None:
        """Wait for background events, then close the connection if this object opened it."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._owned and self._nc is not None:
            try:
                await self._nc.close()
            finally:
                self._nc = None


async def session_published(
    settings: Settings,
    pool: Any,
    *,
    tenant_id: uuid.UUID,
    session_id: uuid.UUID,
    run_id: uuid.UUID,
) -> None:
    """Publish ``session.published`` (a connection of its own: once per published run)."""
    events = DomainEvents(settings)
    try:
        tenant = await pool.fetchval(_TENANT, tenant_id)
        await events.publish(tenant, "session.published", session_id=session_id, run_id=run_id)
    except Exception as exc:  # never fail the publish job for its event
        log.warning("session.published for %s not published: %s", session_id, exc)
    finally:
        await events.aclose()
