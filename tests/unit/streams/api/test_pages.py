"""Cursors: opaque, round-tripping the sort key, and a 400 (UsageError) for anything else."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from streams.api.pages import decode_cursor, encode_cursor, instant, integer, text
from streams.errors import UsageError


def _raw(json: bytes) -> str:
    return base64.urlsafe_b64encode(json).decode()


URL_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_a_cursor_carries_its_key_back() -> None:
    at, last = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), uuid.uuid4()
    cursor = encode_cursor([at.isoformat(), str(last)])
    assert set(cursor) <= URL_SAFE  # goes into a query string as it is
    assert decode_cursor(cursor, instant, uuid.UUID) == [at, last]
    assert decode_cursor(encode_cursor(["d-7", 41]), text, integer) == ["d-7", 41]
    assert decode_cursor(None, integer) is None  # the first page


@pytest.mark.parametrize(
    ("cursor", "read"),
    [
        ("not base64 !", integer),
        (encode_cursor([1, 2]), integer),  # wrong arity
        (encode_cursor(["1"]), integer),  # a string where an integer is expected
        (_raw(b"[1180591620717411303424]"), integer),  # beyond bigint
        (_raw(b"[9223372036854775808]"), integer),
        (encode_cursor([True]), integer),
        (encode_cursor(["a\x00"]), text),
        (encode_cursor(["2026-01-01T00:00:00"]), instant),  # a timestamp without its offset
        (encode_cursor(["yesterday"]), instant),
    ],
)
def test_a_cursor_the_api_did_not_make_is_refused(cursor: str, read: Callable[[Any], Any]) -> None:
    with pytest.raises(UsageError, match="cursor"):
        decode_cursor(cursor, read)
