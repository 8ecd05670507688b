"""Streaming telemetry's operator views: dead letters triaged by signature, and explain.

Dead letters are grouped by error signature - reason code, the stage that failed first, the
schema version the envelope met - so an operator deals with a cause once, not with each of its
ten thousand envelopes: list the groups, look at a sample, then redrive or resolve the whole
group (or one dead letter). A group's id is its signature, encoded like a cursor: it names the
same cause for every tenant, and every statement filters on the caller's tenant, so another
tenant's group id only ever reaches the caller's own dead letters.

Redrive re-runs publish with the same function as ``tideway dlq redrive``, and explain is
``tideway messages show``'s function; both read and write Postgres through the API's shared
pool (no pool or connection of their own per request) and connect to Redis and ClickHouse
themselves, so with the embedded (in-process) ClickHouse a redrive is refused with
``CLICKHOUSE_BUSY`` while another process holds the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from schemas.api import (
    DeadLetterGroupPage,
    DeadLetterGroupQuery,
    DeadLetterPage,
    DeadLetterQuery,
    MessageExplanation,
    ResolveReport,
    ResolveRequest,
)
from streams.adapters.postgres import Conn
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_int, path_text
from streams.api.pages import decode_cursor, integer, page_of, text
from streams.errors import NotFoundError, UsageError
from streams.ingest import dlq, messages
from streams.views import dead_letters

__all__ = [
    "explain_message",
    "get_dead_letter",
    "list_dead_letter_groups",
    "list_dead_letters",
    "redrive_dead_letter",
    "redrive_group",
    "resolve_dead_letter",
    "resolve_group",
]

_GROUP_PAGE = 1000  # ids fetched per statement when acting on a whole group


def _nullable(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


# [reason code, stage, schema, schema version]
_SIGNATURE = (text, _nullable(text), _nullable(text), _nullable(integer))


def _signature(group: str) -> list[Any]:
    try:
        found = decode_cursor(group, *_SIGNATURE)
    except UsageError:
        found = None
    if found is None:
        raise NotFoundError("no such dead-letter group")
    return found


async def list_dead_letter_groups(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, DeadLetterGroupQuery)
    after = decode_cursor(q.cursor, *_SIGNATURE)
    async with context_of(request).pool.acquire() as conn:
        groups = await dead_letters.dead_letter_groups(
            conn, tenant=caller.tenant, state=q.state, limit=q.limit + 1, after=after
        )
    items, next_ = page_of(request, groups, q.limit, dead_letters.signature)
    return reply(DeadLetterGroupPage(items=items, next=next_))


async def list_dead_letters(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, DeadLetterQuery)
    after = decode_cursor(q.cursor, integer)
    signature = _signature(q.group) if q.group is not None else None
    async with context_of(request).pool.acquire() as conn:
        found = await dead_letters.list_dead_letters(
            conn,
            state=q.state,
            tenant=caller.tenant,
            limit=q.limit + 1,
            after=after[0] if after else 0,
            signature=signature,
        )
    items, next_ = page_of(request, found, q.limit, lambda d: (d.id,))
    return reply(DeadLetterPage(items=items, next=next_))


async def get_dead_letter(request: web.Request) -> web.Response:
    caller, dead_letter_id = caller_of(request), path_int(request)
    async with context_of(request).pool.acquire() as conn:
        found = await dead_letters.show_dead_letter(conn, dead_letter_id, caller.tenant)
    return reply(found)


async def _group_ids(conn: Conn, tenant: str, signature: list[Any]) -> list[int]:
    """Every open dead letter of ``tenant`` with ``signature`` (404 when there is none)."""
    ids: list[int] = []
    while True:
        rows = await dead_letters.list_dead_letters(
            conn,
            tenant=tenant,
            limit=_GROUP_PAGE,
            after=ids[-1] if ids else 0,
            signature=signature,
        )
        ids += [r.id for r in rows]
        if len(rows) < _GROUP_PAGE:
            break
    if not ids:
        raise NotFoundError("no open dead letters in this group")
    return ids


async def _redrive(request: web.Request, ids: list[int]) -> web.Response:
    ctx = context_of(request)
    report = await dlq.redrive(ctx.settings, ids=ids, pool=ctx.pool)
    return reply(report)


async def redrive_dead_letter(request: web.Request) -> web.Response:
    caller, dead_letter_id = caller_of(request), path_int(request)
    async with context_of(request).pool.acquire() as conn:
        await dead_letters.show_dead_letter(conn, dead_letter_id, caller.tenant)
    return await _redrive(request, [dead_letter_id])


async def redrive_group(request: web.Request) -> web.Response:
    caller, signature = caller_of(request), _signature(path_text(request, "group"))
    async with context_of(request).pool.acquire() as conn:
        ids = await _group_ids(conn, caller.tenant, signature)
    return await _redrive(request, ids)


async def _resolve(conn: Conn, tenant: str, ids: list[int], note: str) -> web.Response:
    done = await dlq.resolve_dead_letters(conn, note=note, ids=ids, tenant=tenant)
    return reply(
        ResolveReport(
            resolved=[int(r["id"]) for r in done.resolved], not_resolved=list(done.not_resolved)
        )
    )


async def resolve_dead_letter(request: web.Request) -> web.Response:
    caller, dead_letter_id = caller_of(request), path_int(request)
    body = await body_of(request, ResolveRequest)
    async with context_of(request).pool.acquire() as conn:
        await dead_letters.show_dead_letter(conn, dead_letter_id, caller.tenant)
        return await _resolve(conn, caller.tenant, [dead_letter_id], body.note)


async def resolve_group(request: web.Request) -> web.Response:
    caller, signature = caller_of(request), _signature(path_text(request, "group"))
    body = await body_of(request, ResolveRequest)
    async with context_of(request).pool.acquire() as conn:
        ids = await _group_ids(conn, caller.tenant, signature)
        return await _resolve(conn, caller.tenant, ids, body.note)


async def explain_message(request: web.Request) -> web.Response:
    """Everything about one envelope, by id or dedupe key (``tideway messages show``)."""
    caller, ident = caller_of(request), path_text(request, "id")
    if ident.isdigit() and int(ident) >= 2**63:  # the path's kind: digits; ids are bigint
        raise NotFoundError("no such envelope")
    ctx = context_of(request)
    found = await messages.explain(ctx.settings, ident, tenant=caller.tenant, pool=ctx.pool)
    return reply(MessageExplanation.model_validate(found))
