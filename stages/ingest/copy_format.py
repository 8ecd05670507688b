"""Postgres ``COPY … FROM STDIN (FORMAT text)``: how one field is spelled.

The hot path writes its rows as text lines (one f-string per row is far cheaper in Python
than binary per-value encoding). A field is the value with backslash, tab, newline and
carriage return escaped; ``\\N`` is NULL. NUL bytes, which NATS allows in subjects and headers
but Postgres text cannot hold, are spelled out as ``\\u0000``.
"""

from __future__ import annotations


def text(value: str) -> str:
    """``value`` safe for a Postgres text or JSON column (NUL bytes, which NATS allows in
    subjects and headers, are spelled out)."""
    return value.replace("\x00", "\\u0000") if "\x00" in value else value


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
NULL = "\\N"


def copy_text(value: str | None) -> str:
    """``value`` as one field of Postgres ``COPY ... (FORMAT text)`` (``\\N`` for ``None``).

    NUL bytes, which NATS allows in subjects and headers but Postgres text cannot hold, are
    spelled out as ``\\u0000``.
    """
    if value is None:
        return NULL
    if "\x00" in value:
        value = value.replace("\x00", "\\u0000")
    return value.translate(_ESCAPES)


def json_field(value: str | None) -> str:
    """A JSON document as a field: orjson never emits raw tabs, newlines or CRs, so only its
    backslashes need doubling."""
    if value is None:
        return NULL
    return value.replace("\\", "\\\\") if "\\" in value else value


def int_field(value: int | None) -> str:
    """An optional integer as a field."""
    return NULL if value is None else str(value)


def text_array(values: list[str | None]) -> str | None:
    """A Postgres ``text[]`` literal of ``values`` (``None`` elements are ``NULL``), or
    ``None`` when every element is ``None``. Pass it through :func:`copy_text` to make it a
    ``COPY`` field. NUL bytes are spelled out first, inside the element's quotes."""
    if all(value is None for value in values):
        return None
    return "{" + ",".join(
        "NULL" if value is None
        else '"' + text(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        for value in values
    ) + "}"
