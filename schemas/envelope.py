"""The telemetry envelope: what a device publishes, on the wire.

Wire contract. A device publishes one JSON object per message on the subject
``telemetry.<tenant>.<device>.<topic>`` (core NATS, JetStream, or MQTT topic
``telemetry/<tenant>/<device>/<topic>`` through nats-server's MQTT listener)::

    {"ts": "2026-05-01T12:00:00.250Z", "seq": 42, "values": {"temp": 21.5, "bat_mv": 3712}}

``ts``      when the values were *measured*: an RFC 3339 date-time with an offset (``Z`` or
            ``+02:00``), or an integer count of milliseconds since the Unix epoch.
``seq``     optional non-negative integer the device counts up (breaks ties between two
            measurements with the same ``ts``).
``values``  an object; the device schema's parameters read their ``source`` keys (or dotted
            paths) from it. No key or string may contain a NUL character. A number too large
            in magnitude for a 64-bit float (``1e309``, 400 digits) is still JSON: it arrives
            as a :class:`HugeNumber`, and the parameter that reads it reports it as invalid.

Other top-level fields are ignored, so devices can add fields before Tideway reads them.
Optional NATS headers: ``Nats-Msg-Id`` (a stable id per message; repeats are deduplicated,
see ``docs/streaming.md``) and ``traceparent`` (W3C trace context, recorded when valid). The
JSON Schema ``schemas/envelope.schema.json`` is generated from :class:`Envelope` (``python -m
schemas.envelope``) and a test keeps the two in agreement.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainValidator, WithJsonSchema

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_EPOCH_MS = 253_402_300_799_999
_US = timedelta(microseconds=1)
"""9999-12-31T23:59:59.999Z, the last instant a timestamp column can hold."""
MAX_SEQ = 2**63 - 1

SCHEMA_PATH = Path(__file__).with_name("envelope.schema.json")

# RFC 3339 section 5.6 date-time; fractions beyond microseconds are accepted and truncated.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})"
)


def _integral(raw: Any) -> int | None:
    # JSON does not distinguish 5 from 5.0 (nor does JSON Schema's "integer"): accept both.
    if type(raw) is int:
        return raw
    if type(raw) is float and raw.is_integer():
        return int(raw)
    return None


def epoch_us(moment: datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact, no float)."""
    return (moment - EPOCH) // _US


def parse_ts(raw: Any) -> datetime:
    """``ts`` as an aware UTC datetime, from an RFC 3339 string or integer epoch ms."""
    if (ms := _integral(raw)) is not None:
        raw = ms
        if not 0 <= raw <= MAX_EPOCH_MS:
            raise ValueError(f"epoch milliseconds must be within 0..{MAX_EPOCH_MS}")
        return EPOCH + timedelta(milliseconds=raw)
    if type(raw) is str:
        if not _RFC3339.fullmatch(raw):
            raise ValueError("ts must be an RFC 3339 date-time such as 2026-05-01T12:00:00Z")
        try:
            ts = datetime.fromisoformat(raw.upper()).astimezone(UTC)
        except (ValueError, OverflowError):  # month 13, Feb 30, 23:59:60, beyond year 9999
            raise ValueError("ts is not a valid date-time") from None
        # The same range as epoch milliseconds: the hot state orders measurements by a
        # fixed-width text of their time, which a negative number would sort backwards.
        if ts < EPOCH:
            raise ValueError("ts must not be before 1970-01-01T00:00:00Z")
        return ts
    raise ValueError("ts must be an RFC 3339 string or integer epoch milliseconds")


def parse_seq(raw: Any) -> int | None:
    """``seq``: absent/null, or a non-negative 64-bit integer."""
    if raw is None:
        return None
    seq = _integral(raw)
    if seq is None or not 0 <= seq <= MAX_SEQ:
        raise ValueError("seq must be a non-negative 64-bit integer")
    return seq


class HugeNumber:
    """A JSON number in an envelope too large in magnitude for a 64-bit float.

    ``1e309``, ``-1e309`` or 400 written-out digits are valid JSON, and the JSON Schema
    accepts them, but no float can hold them. The decoder keeps such a number as this value
    instead of refusing the whole body, so that only the parameter reading it is invalid
    (``NUMBER_TOO_LARGE``); in ``ts`` or ``seq`` it breaks the contract like any other bad
    value there. ``literal`` is the number as written, and its ``str``: JSON has no number
    that could stand for it, so a stage snapshot shows it as that text.

    Immutable and keyword-only like a frozen dataclass, but not one: orjson writes a
    dataclass as an object (``{"literal": …}``), which would look like something the device
    sent; anything else reaches the snapshot encoder's ``default=str``.
    """

    __slots__ = ("literal",)
    literal: str

    def __init__(self, *, literal: str) -> None:
        object.__setattr__(self, "literal", literal)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"HugeNumber is immutable; cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is HugeNumber and other.literal == self.literal

    def __hash__(self) -> int:
        return hash(self.literal)

    def __reduce__(self) -> tuple[Any, ...]:
        # copy and pickle must rebuild through __init__: setting the slot later is refused.
        return (partial(HugeNumber, literal=self.literal), ())

    def __repr__(self) -> str:
        return f"HugeNumber(literal={self.literal!r})"

    def __str__(self) -> str:
        return self.literal

    @property
    def shown(self) -> str:
        """``literal`` for a message: abbreviated, since it may have 60,000 digits."""
        text = self.literal
        return text if len(text) <= 24 else f"{text[:12]}… ({len(text)} characters)"


_NO_NUL = "^[^\\u0000]*$"
# Pydantic manages "$ref"s itself; the recursive value schema is spliced in by json_schema().
_VALUE_REF = {"x-tideway": "value"}
_VALUE: dict[str, Any] = {
    "description": ("Any JSON value whose strings and keys hold no NUL character. A number"
                    " beyond the range of a 64-bit float (such as 1e309) is accepted; the"
                    " parameter that reads it reports NUMBER_TOO_LARGE."),
    "anyOf": [
        {"type": ["number", "boolean", "null"]},
        {"type": "string", "pattern": _NO_NUL},
        {"type": "array", "items": {"$ref": "#/$defs/Value"}},
        {"type": "object", "propertyNames": {"pattern": _NO_NUL},
         "additionalProperties": {"$ref": "#/$defs/Value"}},
    ],
}

Timestamp = Annotated[
    datetime,
    PlainValidator(parse_ts),
    WithJsonSchema(
        {
            "description": ("Measurement time: RFC 3339 date-time with offset, or epoch ms;"
                            " not before 1970-01-01T00:00:00Z."),
            "oneOf": [
                {"type": "string", "format": "date-time"},
                {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS},
            ],
        }
    ),
]


class Envelope(BaseModel):
    """One telemetry envelope, as published by a device."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        strict=True,
        title="Tideway telemetry envelope",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    ts: Timestamp
    seq: Annotated[
        int | None,
        PlainValidator(parse_seq),
        WithJsonSchema(
            {
                "description": "Device counter; breaks ties between equal ts.",
                "anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
                    {"type": "null"},
                ],
            }
        ),
    ] = None
    values: Annotated[
        dict[str, Any],
        AfterValidator(_no_nul),
        WithJsonSchema({
            "type": "object",
            "description": "Measured values, read by the device schema (no NUL characters).",
            "propertyNames": {"pattern": _NO_NUL},
            "additionalProperties": _VALUE_REF,
        }),
    ]

    @property
    def ts_us(self) -> int:
        """``ts`` as microseconds since the epoch (exact, for ordering measurements)."""
        return epoch_us(self.ts)


def has_nul(value: Any) -> bool:
    """Whether a NUL character hides in any key or string of ``value`` (nested)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in k or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def _no_nul(values: dict[str, Any]) -> dict[str, Any]:
    # Postgres text and JSONB cannot hold NUL; refuse it at the door, like a bad type.
    if has_nul(values):
        raise ValueError("values must not contain NUL characters")
    return values


def json_schema() -> dict[str, Any]:
    """The envelope's JSON Schema (what ``schemas/envelope.schema.json`` holds)."""

    def splice(node: Any) -> Any:
        if node == _VALUE_REF:
            return {"$ref": "#/$defs/Value"}
        if isinstance(node, dict):
            return {k: splice(v) for k, v in node.items()}
        if isinstance(node, list):
            return [splice(v) for v in node]
        return node

    schema: dict[str, Any] = splice(Envelope.model_json_schema())
    schema["$defs"] = {"Value": _VALUE}
    return schema


def _main(argv: list[str]) -> int:
    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if argv[1:] == ["--check"]:
        return 0 if SCHEMA_PATH.read_text() == text else 1
    SCHEMA_PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
