"""Domain events on NATS: what happened to a tenant's sessions and runs, for live views.

Subjects (``streams.names``, namespaced like every other)::

    events.<tenant>.session.published    publish_session wrote the run's summary
    events.<tenant>.run.<state>          a run changed state: pending (created by a retry or
                                         reprocess), cancelled, succeeded, partial, failed

The body is JSON: ``{"type": "run.succeeded", "tenant", "run_id", "session_id", "status",
"at"}``. ``GET /v1/events`` streams a tenant's events to browsers (server-sent events).

Theory of operation. Events are *hints* for live views, not a record: they go on core NATS
(at most once, no stream to provision, nothing retained), each published after the change it
announces is committed - except ``session.published``, sent by the publish job once the summary
is written, an instant before the same completion transaction moves the session's pointer (the
``run.succeeded``/``run.partial`` that follows is sent after that commit). A view that missed an
event, or needs the state for certain, reads the resource: the API is the source of truth.
Publishing never fails the work it reports on: an unreachable NATS is logged and the event lost.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
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

    async def runs_changed(self, pool: Any, runs: Mapping[uuid.UUID, str]) -> None:
        """Publish ``run.<state>`` for each run of ``runs`` (run id -> its new state)."""
        if not runs:
            return
        try:
            async with pool.acquire() as conn:
                rows = await conn.fetch(_RUNS, list(runs))
        except Exception as exc:
            log.warning("run events not published: %s", exc)
            return
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
        if not runs:
            return
        task = asyncio.create_task(self.runs_changed(pool, dict(runs)))
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
