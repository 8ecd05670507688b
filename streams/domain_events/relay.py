"""The relay: from the Postgres outbox to the EVENTS stream, in order, at least once.

Every worker runs one (:meth:`EventRelay.run`); one of them leads. The leader holds the
session advisory lock :data:`LEADER_LOCK` on its LISTEN connection (a direct connection, as
LISTEN needs one, so PgBouncer in transaction mode does not get in the way); the others try
to take it every ``events.relay_poll_s`` and otherwise do nothing - they do not even wake on
the outbox's notifications. A leader whose process or connection dies loses the lock with
its connection, and another worker leads within a poll. Each round also takes the
transaction advisory lock :data:`ROUND_LOCK`, so two rounds never overlap even while a lost
leader's last round is still finishing. A round, in one transaction:

1. ``pg_try_advisory_xact_lock``: another round running now means nothing to do;
2. the oldest :attr:`~streams.config.EventSettings.relay_batch` events not yet relayed;
3. published to JetStream with ``Nats-Msg-Id`` = the outbox id: the first alone, waiting for
   its acknowledgement, then the rest pipelined (all sent, then all acknowledgements awaited),
   each carrying ``Nats-Expected-Last-Msg-Id`` = the id of the event before it;
4. the acknowledged events up to the first that was not stamped ``relayed_at``; commit.

The order holds although the publishes are pipelined: JetStream stores an event only if the
stream's last message is the event before it, so when one is lost (its publish failed, or
its acknowledgement never came and it was not stored) every later event of the round is
refused rather than stored ahead of it, and the next round starts from it. An event that *was*
stored but whose acknowledgement was lost is sent again next round and acknowledged as a
duplicate (JetStream checks ``Nats-Msg-Id`` before the expected last id), so the stream keeps
one copy of every event, in outbox order. The first event of a round carries no expectation
(everything before it was acknowledged), so a round always moves on even if something else
published to the stream. A publish that fails (NATS down, the stream missing) ends the round
after stamping what went out before it; the rest waits for the next round, so nothing is
skipped. Pipelined, a backlog drains about 3.5 times as fast as one publish at a time
(bench/event_relay.py, interleaved: 6,275-6,955 against 1,708-1,931 events/s), and a busy job
engine's workers spend that much less CPU relaying its runs' events (issue 30).

The leader runs a round when the outbox triggers notify ``tideway_events`` and every
``events.relay_poll_s`` in any case. Every round reports the age of the oldest event not yet
relayed (``tideway_event_relay_lag_seconds``; 0 from the workers that do not lead) and each
relayed event's delay from its change to its acknowledgement; relayed events are deleted
after ``events.outbox_keep_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streams.adapters import postgres
from streams.adapters.errors import (
    NATS_FAILURES,
    PG_CLOSED,
    PgError,
    stream_gone,
    wrong_last_msg_id,
)
from streams.adapters.nats import ONE_SHOT_ATTEMPTS, JetStreamContext, Nats, connect_nats
from streams.adapters.outage import Outage
from streams.adapters.postgres import Connection, Pool
from streams.config import Settings
from streams.domain_events.stream import (
    CHANNEL,
    ensure_events_stream,
    event_body,
    message_id,
)
from streams.errors import TransientError
from streams.names import Names

if TYPE_CHECKING:
    from streams.observability.events import RelayObserver

__all__ = ["LEADER_LOCK", "ROUND_LOCK", "EventRelay", "RelayRound"]

log = logging.getLogger(__name__)

LEADER_LOCK: Final = 6075895573793102
"""The session advisory lock the leading relay holds (...101 serialises the job claims)."""
ROUND_LOCK: Final = 6075895573793103
"""The transaction advisory lock each relay round holds."""

PUBLISH_TIMEOUT_S: Final = 2.0
CLEANUP_EVERY_S: Final = 60.0

_TAKE_LEAD: Final = "SELECT pg_try_advisory_lock($1)"
_STOP_LEADING: Final = "SELECT pg_advisory_unlock($1)"
_ROUND: Final = "SELECT pg_try_advisory_xact_lock($1)"
_PENDING: Final = """
SELECT o.id, o.kind, o.run_id, o.session_id, o.fields, o.created_at, t.name AS tenant
FROM event_outbox o JOIN tenants t ON t.id = o.tenant_id
WHERE o.relayed_at IS NULL
ORDER BY o.id
LIMIT $1
"""
_STAMP: Final = """
UPDATE event_outbox SET relayed_at = clock_timestamp() WHERE id = ANY($1::bigint[])
"""
_BACKLOG: Final = """
SELECT coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8
FROM event_outbox WHERE relayed_at IS NULL
"""
_CLEANUP: Final = """
DELETE FROM event_outbox
WHERE relayed_at < clock_timestamp() - make_interval(secs => $1::float8)
"""

_PG_ERRORS: Final = (*PG_CLOSED, PgError, TransientError, TimeoutError)


@dataclass(frozen=True, kw_only=True, slots=True)
class RelayRound:
    """What one round did."""

    leader: bool
    """Whether this round held :data:`ROUND_LOCK` (``False``: another round is running)."""
    relayed: int = 0
    """Events published and stamped."""
    more: bool = False
    """A full batch went out: more are probably waiting (the next round starts at once)."""
    failed: str | None = None
    """Why publishing stopped early (NATS unreachable...), else ``None``."""


class EventRelay:
    """Relays one database's outbox to the EVENTS stream (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        *,
        nc: Nats | None = None,
        observer: RelayObserver | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.names = Names(namespace=settings.namespace)
        self.observer = observer
        self._nc = nc
        self._owned = nc is None
        self._provisioned = False
        self._wake = asyncio.Event()
        self._nats_outage = Outage("nats (event relay)")
        self._pg_outage = Outage("postgres (event relay)")
        self._cleaned = 0.0

    # -- one round --------------------------------------------------------------------------
    async def relay_round(self) -> RelayRound:
        """Relay what is waiting, if this relay gets the lock (see the module docstring)."""
        nc = await self._client()
        js = nc.jetstream()
        if not self._provisioned:
            await ensure_events_stream(js, self.settings)
            self._provisioned = True
        batch = self.settings.events.relay_batch
        delays: list[float] = []
        failed: str | None = None
        async with self.pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(_ROUND, ROUND_LOCK):
                return RelayRound(leader=False)
            rows = await conn.fetch(_PENDING, batch)
            done: list[int] = []
            for row, outcome in zip(rows, await self._publish(js, rows), strict=False):
                if isinstance(outcome, BaseException):
                    if not wrong_last_msg_id(outcome):  # else the event before it went missing
                        if stream_gone(outcome):
                            self._provisioned = False  # make the stream again next round
                        self._nats_outage.failed(outcome)
                        failed = _describe(outcome)
                    break
                done.append(row["id"])
                delays.append(time.time() - row["created_at"].timestamp())
            if done:
                await conn.execute(_STAMP, done)
            if time.monotonic() - self._cleaned >= CLEANUP_EVERY_S:
                await conn.execute(_CLEANUP, self.settings.events.outbox_keep_s)
                self._cleaned = time.monotonic()
        if failed is None:
            self._nats_outage.recovered()
        if self.observer is not None and delays:
            self.observer.on_relayed(delays_s=delays)
        return RelayRound(leader=True, relayed=len(done),
                          more=failed is None and (len(rows) == batch or len(done) < len(rows)),
                          failed=failed)

    async def _publish(self, js: JetStreamContext, rows: list[Any]) -> list[Any]:
        """Publish ``rows`` in order: the first awaited alone, the rest pipelined, each
        expecting the one before it as the stream's last message. One outcome per row, in
        order: its acknowledgement or what its publish raised (when the first fails, the rest
        are not sent and only its outcome comes back)."""
        if not rows:
            return []
        first = rows[0]
        try:
            head: list[Any] = [await self._send(js, first, None)]
        except NATS_FAILURES as exc:
            return [exc]
        # The first publish also set up nats-py's shared reply subscription, so the requests
        # below go out in the order they are created (each is written before it awaits).
        sends = [
            asyncio.ensure_future(self._send(js, row, previous["id"]))
            for previous, row in itertools.pairwise(rows)
        ]
        return head + list(await asyncio.gather(*sends, return_exceptions=True))

    async def _send(self, js: JetStreamContext, row: Any, after: int | None) -> Any:
        headers = {"Nats-Msg-Id": message_id(self.names, row["id"])}
        if after is not None:
            headers["Nats-Expected-Last-Msg-Id"] = message_id(self.names, after)
        return await js.publish(
            self.names.event_subject(row["tenant"], row["kind"]),
            event_body(row),
            timeout=PUBLISH_TIMEOUT_S,
            stream=self.names.events_stream,
            headers=headers,
        )

    async def backlog_age_s(self) -> float:
        """Seconds since the oldest event not yet relayed was written (0: none waiting)."""
        return float(await self.pool.fetchval(_BACKLOG))

    # -- the loop ---------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, *, listener: Connection | None = None
                  ) -> None:
        """Relay until ``stop`` is set, while this relay leads: a round on each notification
        and every poll; otherwise try to become the leader every poll.

        ``listener``: a connection of the caller's that stays open (the worker's LISTEN
        connection, never pooled) to hear the outbox channel on and to hold the leader's
        lock; without one, or once it is lost, the relay opens its own."""
        own: Connection | None = None
        leading: Connection | None = None  # the connection holding LEADER_LOCK
        poll = self.settings.events.relay_poll_s
        coalesce = self.settings.events.relay_coalesce_s
        woken = False
        if listener is not None:
            await listener.add_listener(CHANNEL, self._notified)
        try:
            while not stop.is_set():
                conn = listener if listener is not None and not listener.is_closed() else None
                if conn is None:
                    if own is None or own.is_closed():
                        own = await self._listen()
                    conn = own
                if leading is not None and leading.is_closed():
                    leading = None  # the lock went with its connection
                if leading is None and conn is not None and await self._take_lead(conn):
                    leading = conn
                self._wake.clear()
                if leading is not None:
                    if await self._round():
                        continue
                    woken = False
                elif self.observer is not None:
                    self.observer.on_backlog(age_s=0.0)  # the leader reports the backlog
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        if leading is not None:
                            await _first(self._wake.wait(), stop.wait())
                            woken = self._wake.is_set()
                        else:
                            await stop.wait()
                if leading is not None and woken and coalesce > 0 and not stop.is_set():
                    # Let the changes of the next few milliseconds join this round: a busy
                    # engine notifies once per run change, and each round costs a transaction
                    # and a pool round trip whatever it carries (issue 30: about 200 µs of
                    # worker CPU per event relayed one round each).
                    await asyncio.sleep(coalesce)
        finally:
            if listener is not None and not listener.is_closed():
                with contextlib.suppress(Exception):
                    await listener.remove_listener(CHANNEL, self._notified)
                if leading is listener:
                    with contextlib.suppress(Exception):
                        await listener.execute(_STOP_LEADING, LEADER_LOCK)
            if own is not None and not own.is_closed():
                with contextlib.suppress(Exception):
                    await own.close()
            await self.aclose()

    def _notified(self, *_: Any) -> None:
        self._wake.set()

    async def _take_lead(self, conn: Connection) -> bool:
        try:
            return bool(await conn.fetchval(_TAKE_LEAD, LEADER_LOCK))
        except _PG_ERRORS as exc:
            self._pg_outage.failed(exc)
            return False

    async def _round(self) -> bool:
        """One round and the lag report; ``True`` when the next one should start at once."""
        try:
            await self._client()
        except (*NATS_FAILURES, TransientError) as exc:  # NATS_UNAVAILABLE: not connected yet
            self._nats_outage.failed(exc)
            return False
        try:
            result = await self.relay_round()
            # A round that took all it found leaves nothing older behind (what arrived
            # meanwhile is the next round's); otherwise ask how old the backlog is.
            age = await self.backlog_age_s() if result.failed or result.more else 0.0
        except _PG_ERRORS as exc:
            self._pg_outage.failed(exc)
            return False
        except NATS_FAILURES as exc:  # provisioning the stream
            self._nats_outage.failed(exc)
            return False
        except Exception:  # a bug: say so loudly and keep relaying (the lag alert watches too)
            log.exception("event relay round failed")
            return False
        self._pg_outage.recovered()
        if self.observer is not None:
            self.observer.on_backlog(age_s=age)
        return result.more

    async def _listen(self) -> Connection | None:
        """A connection listening on the outbox channel (``None`` while Postgres is down:
        the poll carries on alone)."""
        try:
            conn = await postgres.connect(
                self.settings.postgres(), limits=self.settings.postgres_timeouts
            )
            await conn.add_listener(CHANNEL, self._notified)
        except _PG_ERRORS as exc:
            self._pg_outage.failed(exc)
            return None
        return conn

    async def _client(self) -> Nats:
        if self._nc is None:
            self._nc = await connect_nats(
                self.settings.nats, name="tideway-event-relay", attempts=ONE_SHOT_ATTEMPTS
            )
        return self._nc

    async def aclose(self) -> None:
        """Close the NATS connection if this relay opened it."""
        if self._owned and self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
            self._nc = None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _first(*waits: Any) -> None:
    """Return when the first of ``waits`` (coroutines) finishes; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
