"""Cursor pagination: every list is ordered on a unique key and pages by that key (keyset).

A page's ``next`` is the request's own path and query with ``cursor`` replaced: the key of its
last item, as base64url JSON (the codec is the read side's, :mod:`streams.views.cursors`,
re-exported here for the handlers). Keyset rather than offset paging keeps each page one index
range scan and keeps a page stable while rows are added in front of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aiohttp import web

from streams.views.cursors import decode_cursor, encode_cursor, instant, integer, text

__all__ = ["decode_cursor", "encode_cursor", "instant", "integer", "page_of", "text"]

T = TypeVar("T")


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
