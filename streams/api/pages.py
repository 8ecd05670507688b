"""Cursor pagination: every list is ordered on a unique key and pages by that key (keyset).

A page's ``next`` is the request's own path and query with ``cursor`` replaced: the key of its
last item, as base64url JSON. The cursor is opaque to clients (they follow ``next``), but it is
not a secret and not trusted: a cursor that does not decode to what the list expects is a 400,
and since every statement also filters on the caller's tenant, a cursor can never reach
another tenant's rows. Keyset rather than offset paging keeps each page one index range scan
and keeps a page stable while rows are added in front of it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import orjson
from aiohttp import web

from streams.errors import UsageError

__all__ = ["decode_cursor", "encode_cursor", "instant", "integer", "page_of", "text"]

_FOREIGN = "cursor is not one this API made (follow a page's `next` link)"

T = TypeVar("T")


def encode_cursor(key: Sequence[Any]) -> str:
    """The opaque cursor for a sort ``key`` (JSON-able values)."""
    return base64.urlsafe_b64encode(orjson.dumps(list(key), default=str)).decode().rstrip("=")


def decode_cursor(cursor: str | None, *parts: Callable[[Any], Any]) -> list[Any] | None:
    """The key a cursor carries, each value read by its ``parts`` function (``datetime``
    strings by :func:`instant`, ids by :class:`uuid.UUID`...); ``None`` for the first page,
    UsageError for a cursor this API did not make."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = orjson.loads(raw)
        if not isinstance(key, list) or len(key) != len(parts):
            raise ValueError("wrong shape")
        return [read(value) for read, value in zip(parts, key, strict=True)]
    except (binascii.Error, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise UsageError(_FOREIGN) from exc


def instant(value: Any) -> datetime:
    """A timestamp from a cursor (an ISO string with its offset)."""
    found = datetime.fromisoformat(value)
    if found.tzinfo is None:
        raise ValueError("a cursor's timestamps carry their offset")
    return found


def text(value: Any) -> str:
    """A text key from a cursor."""
    if not isinstance(value, str) or "\x00" in value:
        raise ValueError("not a text key")
    return value


def integer(value: Any) -> int:
    """An integer key from a cursor (Postgres bigint range)."""
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) >= 2**63:
        raise ValueError("not an integer key")
    return value


def page_of(
    request: web.Request, rows: Sequence[T], limit: int, key: Callable[[T], Sequence[Any]]
) -> tuple[list[T], str | None]:
    """The first ``limit`` of ``rows`` (fetched as ``limit + 1``) and the next page's path."""
    if len(rows) <= limit:
        return list(rows), None
    items = list(rows[:limit])
    query = dict(request.rel_url.query)
    query["cursor"] = encode_cursor(key(items[-1]))
    return items, str(request.rel_url.with_query(query))
