"""The caller's session dead letters: notices intake could not accept (``SESSIONS_DLQ``).

They live in JetStream only (:mod:`streams.views.session_dead_letters`), so the list reads the
stream on the API's own NATS connection, filtered by subject on the caller's tenant
(``dlq.sessions.<tenant>.*``): another tenant's dead letters are never read, whatever the
cursor says. Oldest first, paged by id (the stream sequence) like every list; the notice's
body (a file's worth of text) and any stack trace stay out (``tideway sessions dlq show``).
"""

from __future__ import annotations

from aiohttp import web

from schemas.api import SessionDeadLetterPage, SessionDeadLetterQuery
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, integer, page_of
from streams.views import session_dead_letters

__all__ = ["list_session_dead_letters"]


async def list_session_dead_letters(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, SessionDeadLetterQuery)
    after = decode_cursor(q.cursor, integer)
    ctx = context_of(request)
    found = await session_dead_letters.list_session_dead_letters(
        ctx.settings,
        tenant=caller.tenant,
        after=max(after[0], 0) if after else 0,
        limit=q.limit + 1,
        nc=ctx.nats,
    )
    items, next_ = page_of(request, found, q.limit, lambda d: (d.id,))
    return reply(SessionDeadLetterPage(items=items, next=next_))


ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/session-dead-letters", handler=list_session_dead_letters,
          tag="dead letters", summary="Session notices intake dead-lettered, oldest first",
          query=SessionDeadLetterQuery, response=SessionDeadLetterPage),
)  # fmt: skip
