"""What the API accepts as text: query strings and form fields, checked before anything uses them.

aiohttp hands undecodable input on rather than refusing it: header bytes that are not UTF-8
arrive as lone surrogates (the parser decodes with ``surrogateescape``), and yarl decodes a
query's percent-escapes with replacement characters, so ``?device=%FF`` reads as ``"\ufffd"``.
NUL goes through untouched, and Postgres refuses it (``invalid byte sequence``) deep inside a
query. So the edge re-reads the *raw* query string strictly and checks every form field, and
a request carrying such text is a 400 before any handler or statement sees it.
"""

from __future__ import annotations

import uuid
from urllib.parse import parse_qsl

from aiohttp import BodyPartReader, web

from streams.errors import UsageError

__all__ = ["check_query", "check_text", "path_int", "path_text", "path_uuid", "read_field"]


def check_text(what: str, value: str) -> str:
    """``value`` if it is text Postgres and JSON can carry (UTF-8, no NUL), else UsageError."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"{what} is not valid UTF-8") from exc
    if "\x00" in value:
        raise UsageError(f"{what} contains a NUL character")
    return value


def check_query(raw: str) -> None:
    """Refuse a raw (still percent-encoded) query string that does not decode to clean text."""
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise UsageError("the query string is not valid UTF-8") from exc
    for name, value in pairs:
        check_text("a query parameter name", name)
        check_text(f"query parameter {name!r}", value)


async def read_field(part: BodyPartReader, name: str) -> str:
    """The text of the form field ``part``.

    aiohttp bounds a field read whole by the application's ``client_max_size`` (413 beyond it).
    """
    try:
        data = await part.read(decode=True)
    except RuntimeError as exc:  # aiohttp's word for an unknown (transfer) encoding
        raise UsageError(f"form field {name!r}: {exc}") from exc
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"form field {name!r} is not valid UTF-8") from exc
    return check_text(f"form field {name!r}", text)


def path_uuid(request: web.Request, name: str = "id") -> uuid.UUID:
    """The path parameter ``name`` as an id (400 when it is not one)."""
    raw = request.match_info[name]
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise UsageError(f"not an id: {name}") from exc


def path_int(request: web.Request, name: str = "id") -> int:
    """The path parameter ``name`` as a number (400 when it is not one a bigint holds; the
    route's declared kind, :mod:`streams.api.path_params`, has usually said so already)."""
    raw = request.match_info[name]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19 and int(raw) < 2**63):
        raise UsageError(f"{name} must be a number")
    return int(raw)


def path_text(request: web.Request, name: str) -> str:
    """The path parameter ``name`` as clean text (see :func:`check_text`)."""
    return check_text(f"path parameter {name!r}", request.match_info[name])
