"""Session dead letters as the API's :class:`~schemas.api.SessionDeadLetter`
(``tideway sessions dlq list|show``, ``GET /v1/session-dead-letters``).

They live in JetStream only, so these read ``SESSIONS_DLQ`` through
:class:`streams.sessions.dead_letters.DeadLetterStream` (which a redrive reads through too), on
the caller's NATS connection when one is given (the API's, left open). What only the CLI shows
(the notice's body, its tenant, the stream's time, deliveries and the stack trace) is declared
on the same model as operator-only fields.
"""

from __future__ import annotations

from schemas.api import SessionDeadLetter
from streams.adapters.nats import Nats
from streams.config import Settings
from streams.errors import NotFoundError
from streams.sessions.dead_letters import DeadLetterStream

__all__ = ["list_session_dead_letters", "show_session_dead_letter"]


async def list_session_dead_letters(
    settings: Settings,
    *,
    tenant: str | None = None,
    after: int = 0,
    limit: int = 100,
    nc: Nats | None = None,
) -> list[SessionDeadLetter]:
    """Dead-lettered notices, oldest first, with ids above ``after`` (only ``tenant``'s)."""
    async with DeadLetterStream(settings, nc) as dlq:
        return await dlq.list(tenant=tenant, after=after, limit=limit)


async def show_session_dead_letter(settings: Settings, dead_letter_id: int) -> SessionDeadLetter:
    """One dead letter (``NotFoundError`` if there is none with that id)."""
    async with DeadLetterStream(settings) as dlq:
        dead = await dlq.get(dead_letter_id)
    if dead is None:
        raise NotFoundError(f"no session dead letter {dead_letter_id}")
    return dead
