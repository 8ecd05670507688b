"""``GET /v1/events``: the caller's domain events as server-sent events (``text/event-stream``).

The handler reads the EVENTS stream (:mod:`streams.domain_events`: events written by Postgres in
the transaction of each change, relayed to JetStream) through an ordered JetStream consumer
filtered to ``events.<tenant>.>`` - the caller's tenant, from its key, so a stream can only
ever carry its own tenant's events - and forwards each as one SSE message whose ``id`` is the
event's stream sequence, ``event`` its type (``run.succeeded``) and ``data`` its JSON body. A
client that reconnects with ``Last-Event-ID`` (the header, or ``?last_event_id=`` for clients
that cannot set headers) gets every event after that one that the stream still holds
(``events.max_age_s``), then the live ones; without it, only events from now on. A comment
line is sent every 15 s so proxies keep the connection open; the stream ends when the client
goes, the API stops, or the key that opened it is revoked (checked every :data:`KEY_CHECK_S`
seconds).

aiohttp-sse (aio-libs) writes the SSE framing, the keep-alive pings and notices a client that
has gone; a hand-written ``StreamResponse`` would redo exactly that. A browser's
``EventSource`` cannot send an ``Authorization`` header: a page reads the stream with ``fetch``
(which can), as the API accepts keys only in headers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from aiohttp import web
from aiohttp_sse import sse_response
from nats.js.api import ConsumerConfig, DeliverPolicy

from schemas.api import EventStreamQuery
from streams.adapters.errors import JsNotFound, PgError
from streams.adapters.nats import Msg
from streams.api.bodies import query_of
from streams.api.context import caller_of, context_of
from streams.api.openapi import Route
from streams.api.request_id import HEADER, REQUEST_ID
from streams.domain_events import ensure_events_stream
from streams.errors import TransientError, UsageError
from streams.names import Names

__all__ = ["ROUTES", "setup", "stream_events"]

log = logging.getLogger(__name__)

_BACKLOG: Final = 1000  # events held for a slow client before its stream is ended
_POLL_S: Final = 1.0  # how often a quiet stream checks that it should go on
_CLOSING = web.AppKey("events_closing", asyncio.Event)
KEY_CHECK_S: Final = 2.0
"""How often an open stream checks that its API key is not revoked: a revocation ends the
streams it opened within this (plus one poll)."""
_KEY_VALID: Final = "SELECT revoked_at IS NULL FROM api_keys WHERE id = $1"
_IDLE_HEARTBEAT_S: Final = 5.0


def _last_event_id(request: web.Request) -> int | None:
    """The sequence the client saw last: ``Last-Event-ID``, else ``?last_event_id=``."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None or raw == "":
        return query_of(request, EventStreamQuery).last_event_id
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise UsageError(f"Last-Event-ID {raw[:40]!r}: the id of an event this stream sent")
    return int(raw)


def _consumer(last: int | None) -> ConsumerConfig:
    if last is None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=last + 1)


async def _key_valid(pool: Any, key_id: Any) -> bool:
    """Whether the stream's key is still unrevoked; ``True`` when Postgres cannot say (an
    outage does not cut every stream; the next check after it does)."""
    try:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval(_KEY_VALID, key_id))
    except (OSError, TimeoutError, PgError, TransientError):
        return True


def setup(app: web.Application) -> None:
    """Let open streams end when ``app`` shuts down (instead of holding its shutdown)."""
    app[_CLOSING] = asyncio.Event()

    async def close_streams(app: web.Application) -> None:
        app[_CLOSING].set()

    app.on_shutdown.append(close_streams)


async def stream_events(request: web.Request) -> web.StreamResponse:
    """Stream the caller's tenant's domain events until the client or the API goes."""
    ctx, caller = context_of(request), caller_of(request)
    closing = request.app[_CLOSING]
    queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=_BACKLOG)

    behind = asyncio.Event()

    async def on_event(msg: Msg) -> None:
        if queue.full():  # end the stream: the client reconnects from the last id it got
            behind.set()
            return
        queue.put_nowait(msg)

    last = _last_event_id(request)
    names = Names(namespace=ctx.settings.namespace)
    kind_after = names.event_subject(caller.tenant, "")  # the event's type is its subject's tail
    js = ctx.nats.jetstream()

    async def subscribe() -> Any:
        return await js.subscribe(
            names.tenant_events_subjects(caller.tenant), stream=names.events_stream,
            cb=on_event, ordered_consumer=True, config=_consumer(last),
            idle_heartbeat=_IDLE_HEARTBEAT_S,
        )  # fmt: skip

    try:
        subscription = await subscribe()
    except JsNotFound:  # no relay has run yet: the stream is made by whoever comes first
        await ensure_events_stream(js, ctx.settings)
        subscription = await subscribe()
    try:
        async with sse_response(request, headers={HEADER: request[REQUEST_ID]}) as stream:
            checked = time.monotonic()
            while stream.is_connected() and not closing.is_set():
                if behind.is_set() and queue.empty():
                    log.warning("event stream of %s fell behind; closed for the client to "
                                "resume from its last event", caller.tenant)
                    break
                if time.monotonic() - checked >= KEY_CHECK_S:
                    checked = time.monotonic()
                    if not await _key_valid(ctx.pool, caller.key_id):
                        log.info("event stream closed: its API key was revoked")
                        break
                try:
                    msg = await asyncio.wait_for(queue.get(), _POLL_S)
                except TimeoutError:
                    continue
                kind = msg.subject.removeprefix(kind_after)  # events.<tenant>.<kind>
                try:
                    await stream.send(msg.data.decode(), id=str(msg.metadata.sequence.stream),
                                      event=kind)
                except ConnectionError:
                    break
        return stream
    finally:
        await subscription.unsubscribe()


ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/events", handler=stream_events, tag="events",
          summary="The caller's domain events, live (server-sent events)",
          description=(
              "One SSE message per event: `id` its sequence in the EVENTS stream, `event` its "
              "type (`session.published`, `run.<state>`), `data` its JSON body. Events are "
              "written in the transaction of the change they announce (an outbox) and "
              "delivered at least once, in commit order per run and session. Send "
              "`Last-Event-ID` (or `last_event_id`) to resume after a gap. See docs/api.md."
          ),
          query=EventStreamQuery,
          content={"text/event-stream": {"schema": {"type": "string"}}}),
)  # fmt: skip
