"""The kinds of path parameter (``/v1/runs/{id}``, ``/v1/devices/{device}``), each declared once.

A :class:`PathParam` is what the OpenAPI document says a parameter is (its JSON Schema) and the
check that holds every request to it, made from the same pattern, so the document and the
behaviour cannot disagree: a value the document calls valid reaches the handler, any other is
a 400 naming the parameter before the handler or a statement sees it. The route table
(:data:`streams.api.routes.ROUTES`) gives each ``{parameter}`` of a path its kind.

Patterns are written in the dialect JSON Schema (ECMA-262) and Python's ``re`` share, and are
checked whole (``fullmatch``: ``$`` must not let a trailing newline through).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from schemas.api import CURSOR_PATTERN
from schemas.device_schema import SLUG_PATTERN
from stages.batch.export.files import EXPORTS
from streams.errors import UsageError
from streams.identity.ids import DEVICE_RE, TENANT_RE

__all__ = [
    "DEVICE",
    "EXPORT_FILE",
    "GROUP",
    "KEY_ID",
    "LAP",
    "MESSAGE",
    "NUMERIC_ID",
    "SCHEMA_NAME",
    "UUID_ID",
    "PathParam",
    "check_path",
]

_BIGINT_MAX: Final = 2**63 - 1  # Postgres bigint: every numeric id column
_INT_MAX: Final = 2**31 - 1  # a lap number (int32 in the laps dataset)


def _bare(pattern: str) -> str:
    """``pattern`` without its anchors, to be combined with others."""
    return pattern.removeprefix("^").removesuffix("$")


@dataclass(frozen=True, kw_only=True)
class PathParam:
    """One kind of path parameter: its JSON Schema and the check that enforces it."""

    pattern: str
    """The whole value's pattern, anchored (``^…$``)."""
    must_be: str
    """What a refused value's 400 says it must be."""
    maximum: int | None = None
    """For integers: the largest (the pattern says digits only)."""
    schema: Mapping[str, Any] = field(default_factory=dict)
    """The document's JSON Schema (default: a string with ``pattern``)."""
    description: str | None = None

    def described(self) -> dict[str, Any]:
        """The JSON Schema the document gives this parameter."""
        return dict(self.schema) if self.schema else {"type": "string", "pattern": self.pattern}

    def check(self, name: str, raw: str) -> str:
        """``raw`` if it is of this kind, else :class:`UsageError` (400)."""
        if re.fullmatch(self.pattern, raw) is None or (
            self.maximum is not None and int(raw) > self.maximum
        ):
            raise UsageError(f"path parameter {name!r} must be {self.must_be}")
        return raw


def _integer(maximum: int) -> PathParam:
    return PathParam(
        pattern=f"^[0-9]{{1,{len(str(maximum))}}}$",
        maximum=maximum,
        must_be=f"a whole number from 0 to {maximum}",
        schema={"type": "integer", "minimum": 0, "maximum": maximum},
    )


_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

UUID_ID: Final = PathParam(
    pattern=f"^{_HEX_UUID}$",
    must_be="an id (a UUID: 8-4-4-4-12 hex digits)",
    schema={"type": "string", "format": "uuid"},
)
NUMERIC_ID: Final = _integer(_BIGINT_MAX)
LAP: Final = _integer(_INT_MAX)
DEVICE: Final = PathParam(
    pattern=f"^{DEVICE_RE.pattern}$",
    must_be="a device id (1 to 128 letters, digits, - and _)",
    description="The device's id within the caller's tenant.",
)
SCHEMA_NAME: Final = PathParam(
    pattern=SLUG_PATTERN,
    must_be="a schema name (lower case letters, digits, - and _; at most 63)",
)
KEY_ID: Final = PathParam(
    pattern=r"^[a-z2-7]{16}$",
    must_be="a credential key id (16 characters of a-z and 2-7)",
)
GROUP: Final = PathParam(
    pattern=CURSOR_PATTERN,
    must_be="a dead-letter group id (as a group's `id` spells it)",
    description="A group's opaque `id` (base64url, as `GET /v1/dead-letter-groups` answers it).",
)
_TENANT = _bare(TENANT_RE.pattern)
MESSAGE: Final = PathParam(
    pattern=(
        r"^(?:[0-9]{1,19}"  # the envelope's id
        rf"|m:{_TENANT}:[\x21-\x7e]{{1,200}}"  # dedupe key of an envelope with a message id
        rf"|r:{_TENANT}:[0-9]{{1,20}}:[0-9]{{1,20}}"  # ... without one: arrival ns, stream seq
        rf"|[0-9a-fA-F]{{32}}|{_HEX_UUID})$"  # a dedupe key's digest, bare or as a UUID
    ),
    must_be="an envelope id, a dedupe key (`m:<tenant>:<message id>`, "
    "`r:<tenant>:<ns>:<seq>`) or a dedupe key's digest",
    description=(
        "An envelope's id (digits), its dedupe key (`m:<tenant>:<message id>` when it was "
        "published with a `Nats-Msg-Id`, else `r:<tenant>:<received ns>:<stream seq>`) or the "
        "key's digest (32 hex digits, or the same as a UUID)."
    ),
)


EXPORT_FILE: Final = PathParam(
    pattern="^(?:" + "|".join(re.escape(name) for name in EXPORTS) + ")$",
    must_be=f"one of {', '.join(EXPORTS)}",
    schema={"type": "string", "enum": list(EXPORTS)},
    description="The file: "
    + "; ".join(f"`{f.name}` ({f.media_type}): {f.description}" for f in EXPORTS.values())
    + ".",
)


def check_path(request: web.Request, kinds: Mapping[str, PathParam]) -> None:
    """Refuse (400) a request whose path parameters are not of their declared kinds."""
    for name, kind in kinds.items():
        kind.check(name, request.match_info[name])
