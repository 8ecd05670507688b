"""The ``ingress`` stage's pure parts: what arrived, who sent it, and its dedupe key.

A :class:`Receipt` is one JetStream message as the consumer received it. Its identity is the
*receipt* ``(stream_seq, received_at)``: the stream sequence and the time JetStream stored
the message, both identical on every redelivery and replay of that message.

Dedupe keys (spec 001):

* with ``Nats-Msg-Id``: ``m:<tenant>:<msg id>`` — stable for every repeat of that id;
* without: ``r:<tenant>:<received_at ns>:<stream seq>`` — includes ``received_at`` as the spec
  asks, so the same payload published twice is two events, and the stream sequence, so two
  messages stored in the same nanosecond stay distinct. Because both parts come from the
  stream, a redelivery of the *same* message maps to the *same* key and is recognised as
  already recorded instead of being processed twice.

:func:`decode_envelope` is the hot-path equivalent of validating with
:class:`schemas.envelope.Envelope` (a property test keeps them in agreement); it skips
building a pydantic model per envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from schemas.envelope import EPOCH, parse_seq, parse_ts
from stages.errors import StageError

TOO_LARGE = "ENVELOPE_TOO_LARGE"
UNPARSEABLE = "ENVELOPE_UNPARSEABLE"
INVALID = "ENVELOPE_INVALID"
BAD_SUBJECT = "SUBJECT_INVALID"

_US = timedelta(microseconds=1)


class EnvelopeError(StageError):
    """The message is not a well-formed envelope (``code`` says how)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Receipt:
    """One message as received from the TELEMETRY stream."""

    subject: str
    data: bytes
    headers: Mapping[str, str] | None
    stream_seq: int
    received_at_ns: int
    """When JetStream stored the message (ns since the epoch); stable across redeliveries."""
    delivered: int = 1
    """How many times JetStream has delivered it, this time included."""

    @property
    def msg_id(self) -> str | None:
        """The ``Nats-Msg-Id`` header, if the publisher set one."""
        return self.headers.get("Nats-Msg-Id") or None if self.headers else None

    @property
    def traceparent(self) -> str | None:
        return self.headers.get("traceparent") or None if self.headers else None

    @property
    def received_at(self) -> datetime:
        """``received_at_ns`` as an aware datetime (microsecond precision, floored)."""
        return EPOCH + (self.received_at_ns // 1000) * _US


@dataclass(frozen=True, kw_only=True, slots=True)
class SubjectParts:
    """``telemetry.<tenant>.<device>.<topic>`` taken apart."""

    tenant: str
    device: str
    topic: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodedEnvelope:
    """A well-formed envelope's fields (see :class:`schemas.envelope.Envelope`)."""

    ts: datetime
    ts_us: int
    seq: int | None
    values: dict[str, Any]


def parse_subject(subject: str, prefix: str = "") -> SubjectParts | None:
    """Split an envelope subject; ``prefix`` is the namespace (``""`` in production)."""
    if prefix:
        if not subject.startswith(prefix + "."):
            return None
        subject = subject[len(prefix) + 1 :]
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != "telemetry" or not all(parts[1:]):
        return None
    return SubjectParts(tenant=parts[1], device=parts[2], topic=parts[3])


def dedupe_key(tenant: str, receipt: Receipt) -> str:
    """Spec 001's ``source_deduplication_key`` for ``receipt`` (see the module docstring)."""
    msg_id = receipt.msg_id
    if msg_id is not None:
        return f"m:{tenant}:{msg_id}"
    return f"r:{tenant}:{receipt.received_at_ns}:{receipt.stream_seq}"


def check_size(receipt: Receipt, max_bytes: int) -> None:
    """Refuse payloads larger than ``max_bytes`` before anything parses them."""
    if len(receipt.data) > max_bytes:
        raise EnvelopeError(
            f"payload is {len(receipt.data)} bytes; the limit is {max_bytes}", code=TOO_LARGE
        )


def decode_envelope(data: bytes) -> DecodedEnvelope:
    """Parse and check one envelope body; raises :class:`EnvelopeError`."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"payload is not JSON: {exc}", code=UNPARSEABLE) from None
    if type(doc) is not dict:
        raise EnvelopeError("payload is not a JSON object", code=UNPARSEABLE)
    if "ts" not in doc:
        raise EnvelopeError("ts is missing", code=INVALID)
    try:
        ts = parse_ts(doc["ts"])
        seq = parse_seq(doc.get("seq"))
    except ValueError as exc:
        raise EnvelopeError(str(exc), code=INVALID) from None
    values = doc.get("values")
    if type(values) is not dict:
        raise EnvelopeError(
            "values is missing" if values is None else "values must be an object", code=INVALID
        )
    return DecodedEnvelope(ts=ts, ts_us=(ts - EPOCH) // _US, seq=seq, values=values)
