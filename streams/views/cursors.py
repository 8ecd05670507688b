"""Keyset cursors: the sort key of a page's last item as opaque base64url JSON.

Every list pages on a unique key (``streams.api.pages`` puts the key in a page's ``next``);
a dead-letter group's id is its signature encoded the same way. A cursor is opaque to clients
but neither secret nor trusted: one that does not decode to the key a list expects is a
``UsageError`` (a 400), and since every statement also filters on the caller's tenant, a cursor
can never reach another tenant's rows.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson

from streams.errors import UsageError

__all__ = ["decode_cursor", "encode_cursor", "instant", "integer", "text"]

_FOREIGN = "cursor is not one this API made (follow a page's `next` link)"


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
