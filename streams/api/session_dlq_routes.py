"""The caller's session dead letters: notices intake could not accept (``SESSIONS_DLQ``).

They live in JetStream only (:mod:`streams.sessions.dead_letters`), so the list reads the
stream on the API's own NATS connection, filtered by subject on the caller's tenant
(``dlq.sessions.<tenant>.*``): another tenant's dead letters are never read, whatever the
cursor says. Oldest first, paged by id (the stream sequence) like every list; the notice's
body (a file's worth of text) and any stack trace stay out (``tideway sessions dlq show``).
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from schemas.api import SessionDeadLetter, SessionDeadLetterPage, SessionDeadLetterQuery
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, integer, page_of
from streams.sessions.dead_letters import DeadNotice, list_dead_notices

__all__ = ["ROUTES", "list_session_dead_letters"]


def _instant(value: str | None) -> datetime | None:
    """A stored timestamp, or ``None`` for one missing or not ISO 8601 with its offset."""
    try:
        found = datetime.fromisoformat(value) if value else None
    except ValueError:
        return None
    return found if found is not None and found.tzinfo is not None else None


def _summary(dead: DeadNotice) -> SessionDeadLetter:
    return SessionDeadLetter(
        id=dead.id,
        subject=dead.subject,
        device=dead.device,
        code=dead.code,
        message=dead.message,
        error_type=dead.error_type,
        retry_count=dead.retry_count,
        first_seen_at=_instant(dead.first_seen_at),
        last_seen_at=_instant(dead.last_seen_at),
    )


async def list_session_dead_letters(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, SessionDeadLetterQuery)
    after = decode_cursor(q.cursor, integer)
    ctx = context_of(request)
    found = await list_dead_notices(
        ctx.settings,
        tenant=caller.tenant,
        after=max(after[0], 0) if after else 0,
        limit=q.limit + 1,
        nc=ctx.nats,
    )
    items, next_ = page_of(request, found, q.limit, lambda d: (d.id,))
    return reply(SessionDeadLetterPage(items=[_summary(d) for d in items], next=next_))


ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/session-dead-letters", handler=list_session_dead_letters,
          tag="dead letters", summary="Session notices intake dead-lettered, oldest first",
          query=SessionDeadLetterQuery, response=SessionDeadLetterPage),
)  # fmt: skip
