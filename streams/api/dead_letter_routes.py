"""Streaming telemetry's dead letters, triaged by signature: list, show, redrive, resolve.

Dead letters are grouped by error signature - reason code, the stage that failed first, the
schema version the envelope met - so an operator deals with a cause once, not with each of its
ten thousand envelopes: list the groups, look at a sample, then redrive or resolve the whole
group (or one dead letter). A group's id is its signature, encoded like a cursor: it names the
same cause for every tenant, and every statement filters on the caller's tenant, so another
tenant's group id only ever reaches the caller's own dead letters.

Redrive re-runs publish with the same function as ``tideway dlq redrive``; it reads and writes
Postgres through the API's shared pool (no pool or connection of its own per request) and
connects to Redis and ClickHouse itself, so with the embedded (in-process) ClickHouse a
redrive is refused with ``CLICKHOUSE_BUSY`` while another process holds the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from schemas.api import (
    DeadLetter,
    DeadLetterGroupPage,
    DeadLetterGroupQuery,
    DeadLetterPage,
    DeadLetterQuery,
    RedriveReport,
    ResolveReport,
    ResolveRequest,
)
from streams.adapters.postgres import Conn
from streams.api import path_params as pp
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_int, path_text
from streams.api.keys import Caller, key_label
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, integer, page_of, text
from streams.errors import NotFoundError, UsageError
from streams.ingest import dlq
from streams.views import dead_letters

__all__ = [
    "ROUTES",
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


async def _resolve(conn: Conn, caller: Caller, ids: list[int], note: str) -> web.Response:
    by = await key_label(conn, caller.key_id)
    done = await dlq.resolve_dead_letters(conn, note=note, ids=ids, tenant=caller.tenant, by=by)
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
        return await _resolve(conn, caller, [dead_letter_id], body.note)


async def resolve_group(request: web.Request) -> web.Response:
    caller, signature = caller_of(request), _signature(path_text(request, "group"))
    body = await body_of(request, ResolveRequest)
    async with context_of(request).pool.acquire() as conn:
        ids = await _group_ids(conn, caller.tenant, signature)
        return await _resolve(conn, caller, ids, body.note)


_TAG = "dead letters"
# Each path's parameters (their kinds: schema and check) and the one text of its 404.
_GROUP, _DEAD_LETTER = {"group": pp.GROUP}, {"id": pp.NUMERIC_ID}
_NO_GROUP = "no such dead-letter group with open dead letters"
_NO_DEAD_LETTER = "no such dead letter"

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/dead-letter-groups", handler=list_dead_letter_groups,
          tag=_TAG, summary="Dead letters grouped by error signature, with counts and a sample",
          query=DeadLetterGroupQuery, response=DeadLetterGroupPage),
    Route(method="POST", path="/v1/dead-letter-groups/{group}/redrive", handler=redrive_group,
          tag=_TAG, summary="Redrive every open dead letter of a group",
          response=RedriveReport, path_types=_GROUP, not_found=_NO_GROUP, errors=(422,)),
    Route(method="POST", path="/v1/dead-letter-groups/{group}/resolve", handler=resolve_group,
          tag=_TAG, summary="Resolve every open dead letter of a group", body=ResolveRequest,
          response=ResolveReport, path_types=_GROUP, not_found=_NO_GROUP),
    Route(method="GET", path="/v1/dead-letters", handler=list_dead_letters, tag=_TAG,
          summary="Dead letters (of one group), oldest first", query=DeadLetterQuery,
          response=DeadLetterPage, not_found="no such dead-letter group"),
    Route(method="GET", path="/v1/dead-letters/{id}", handler=get_dead_letter, tag=_TAG,
          summary="One dead letter with its original envelope", response=DeadLetter,
          path_types=_DEAD_LETTER, not_found=_NO_DEAD_LETTER),
    Route(method="POST", path="/v1/dead-letters/{id}/redrive", handler=redrive_dead_letter,
          tag=_TAG, summary="Re-run publish for one dead letter", response=RedriveReport,
          path_types=_DEAD_LETTER, not_found=_NO_DEAD_LETTER, errors=(422,)),
    Route(method="POST", path="/v1/dead-letters/{id}/resolve", handler=resolve_dead_letter,
          tag=_TAG, summary="Close one dead letter with a note", body=ResolveRequest,
          response=ResolveReport, path_types=_DEAD_LETTER, not_found=_NO_DEAD_LETTER),
)  # fmt: skip
