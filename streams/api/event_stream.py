"""``GET /v1/events``: the caller's domain events as server-sent events (``text/event-stream``).

The handler subscribes to ``events.<tenant>.>`` on the API's NATS connection - the caller's
tenant, from its key, so a stream can only ever carry its own tenant's events - and forwards
each as one SSE message whose ``event`` is the type (``run.succeeded``) and whose ``data`` is
the JSON body (see :mod:`streams.domain_events`). A comment line is sent every 15 s so proxies
keep the connection open; the stream ends when the client goes, the API stops, or the key
that opened it is revoked (checked every :data:`KEY_CHECK_S` seconds).

aiohttp-sse (aio-libs) writes the SSE framing, the keep-alive pings and notices a client that
has gone; a hand-written ``StreamResponse`` would redo exactly that. Events are hints (core NATS,
at most once): a client reconnecting after a gap re-reads what it shows; ``Last-Event-ID`` is
not replayed. A browser's ``EventSource`` cannot send an ``Authorization`` header: a page reads
the stream with ``fetch`` (which can), as the API accepts keys only in headers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

import asyncpg
import orjson
from aiohttp import web
from aiohttp_sse import sse_response
from nats.aio.msg import Msg

from streams.api.context import caller_of, context_of
from streams.api.request_id import HEADER, REQUEST_ID
from streams.errors import TransientError
from streams.names import Names

__all__ = ["setup", "stream_events"]

log = logging.getLogger(__name__)

_BACKLOG: Final = 1000  # events held for a slow client before newer ones are dropped
_POLL_S: Final = 1.0  # how often a quiet stream checks that it should go on
_CLOSING = web.AppKey("events_closing", asyncio.Event)
KEY_CHECK_S: Final = 2.0
"""How often an open stream checks that its API key is not revoked: a revocation ends the
streams it opened within this (plus one poll)."""
_KEY_VALID: Final = "SELECT revoked_at IS NULL FROM api_keys WHERE id = $1"


async def _key_valid(pool: Any, key_id: Any) -> bool:
    """Whether the stream's key is still unrevoked; ``True`` when Postgres cannot say (an
    outage does not cut every stream; the next check after it does)."""
    try:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval(_KEY_VALID, key_id))
    except (OSError, TimeoutError, asyncpg.PostgresError, TransientError):
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

    async def on_event(msg: Msg) -> None:
        if queue.full():
            log.warning("event stream of %s is behind; an event was dropped", caller.tenant)
            return
        queue.put_nowait(msg)

    subject = Names(namespace=ctx.settings.namespace).events_subjects(caller.tenant)
    subscription = await ctx.nats.subscribe(subject, cb=on_event)
    try:
        await ctx.nats.flush()  # subscribed before the client hears "connected"
        async with sse_response(request, headers={HEADER: request[REQUEST_ID]}) as stream:
            checked = time.monotonic()
            while stream.is_connected() and not closing.is_set():
                if time.monotonic() - checked >= KEY_CHECK_S:
                    checked = time.monotonic()
                    if not await _key_valid(ctx.pool, caller.key_id):
                        log.info("event stream closed: its API key was revoked")
                        break
                try:
                    msg = await asyncio.wait_for(queue.get(), _POLL_S)
                except TimeoutError:
                    continue
                kind = orjson.loads(msg.data).get("type", "message")
                try:
                    await stream.send(msg.data.decode(), event=kind)
                except ConnectionError:
                    break
        return stream
    finally:
        await subscription.unsubscribe()
