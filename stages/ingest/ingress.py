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
building a pydantic model per envelope. orjson refuses a number too large for a 64-bit float
(``1e309``), which is valid JSON; only on that refusal is the body parsed again, slowly, by
:func:`_loads_huge`, which keeps such numbers as :class:`~schemas.envelope.HugeNumber` so the
parameter reading one is invalid instead of the whole envelope unparseable.

Error messages say what is wrong and where (``line 1 column 28``), never quote the body: the
JSON decoders' texts are of that kind, and a message is stored and shown where envelope values
are not meant to be (spec 000 §15).

``traceparent`` is recorded only when valid by W3C Trace Context §3.2: a version-00 shape
(lowercase hex), a version other than ``ff``, and trace and parent ids that are not all zeros.
The recommendation says a receiver must ignore any other header, so it is stored as NULL.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import orjson

from schemas import error_codes as codes
from schemas.envelope import (
    EPOCH,
    MAX_EPOCH_MS,
    HugeNumber,
    epoch_us,
    has_nul,
    parse_seq,
    parse_ts,
)
from stages.errors import StageError

TOO_LARGE = codes.ENVELOPE_TOO_LARGE
UNPARSEABLE = codes.ENVELOPE_UNPARSEABLE
INVALID = codes.ENVELOPE_INVALID
BAD_SUBJECT = codes.SUBJECT_INVALID

_US = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)

# The registry's spelling of tenants, device ids and topics; anything else cannot be ours.
_SUBJECT = re.compile(
    r"telemetry\.([a-z0-9][a-z0-9_-]{0,62})\.([A-Za-z0-9_-]{1,128})\.([A-Za-z0-9_-]{1,64})"
)
# version-trace id-parent id-flags; the lookaheads refuse what W3C calls invalid (version
# ff, an all-zero trace id or parent id), so one match decides.
_TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
)
_PLAIN_ID = re.compile(r"[\x21-\x7e]{1,200}")
HUGE_NUMBER_REFUSAL = "number is infinity when parsed as double"
"""How orjson words its refusal of ``1e309`` (a unit test pins it, should a release reword it)."""
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class EnvelopeError(StageError):
    """The message is not a well-formed envelope (``code`` says how)."""


class Receipt(NamedTuple):
    """One message as received from the TELEMETRY stream (build with :meth:`of`).

    A ``NamedTuple``: one is made per message on the hot path, and a tuple is several times
    cheaper to build than a frozen dataclass while just as immutable.
    """

    subject: str
    data: bytes
    headers: Mapping[str, str] | None
    stream_seq: int
    received_at_ns: int
    """When JetStream stored the message (ns since the epoch); stable across redeliveries."""
    delivered: int
    """How many times JetStream has delivered it, this time included."""
    received_at: datetime
    """``received_at_ns`` as an aware datetime (microsecond precision, floored)."""
    received_iso: str
    """``received_at`` in ISO 8601, made once for the rows and documents that carry it."""

    @classmethod
    def of(cls, *, subject: str, data: bytes, headers: Mapping[str, str] | None,
           stream_seq: int, received_at_ns: int, delivered: int = 1) -> Receipt:
        """A receipt, with its derived fields filled in."""
        us = received_at_ns // 1000
        return cls(subject, data, headers, stream_seq, received_at_ns, delivered,
                   EPOCH + us * _US, iso_utc(us))

    @property
    def msg_id(self) -> str | None:
        """The ``Nats-Msg-Id`` header, if the publisher set one."""
        return self.headers.get("Nats-Msg-Id") or None if self.headers else None

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` header when valid (anything else is not recorded)."""
        value = self.headers.get("traceparent") if self.headers else None
        return value if value and _TRACEPARENT.fullmatch(value) else None


_SECONDS: dict[int, str] = {}


def iso_utc(us: int) -> str:
    """``EPOCH + us`` µs in ISO 8601, exactly as ``datetime.isoformat`` spells it.

    The hot path formats two timestamps per envelope, and the envelopes of a batch share a
    handful of distinct seconds, so the date-and-time part is formatted once per second (a
    small cache) and only the microseconds per call.
    """
    second, fraction = divmod(us, 1_000_000)
    head = _SECONDS.get(second)
    if head is None:
        if len(_SECONDS) >= 4096:
            _SECONDS.clear()
        head = _SECONDS[second] = (EPOCH + second * _SECOND).isoformat()[:-6]
    return f"{head}.{fraction:06d}+00:00" if fraction else f"{head}+00:00"


class SubjectParts(NamedTuple):
    """``telemetry.<tenant>.<device>.<topic>`` taken apart (a tuple: one per envelope)."""

    tenant: str
    device: str
    topic: str


class DecodedEnvelope(NamedTuple):
    """A well-formed envelope's fields (see :class:`schemas.envelope.Envelope`)."""

    ts: datetime
    ts_us: int
    seq: int | None
    values: dict[str, Any]


def parse_subject(subject: str, prefix: str = "") -> SubjectParts | None:
    """Split an envelope subject; ``prefix`` is the namespace (``""`` in production).

    ``None`` unless every part is spelled the way the registry allows (so nothing odd, such
    as a NUL byte NATS would carry happily, ever reaches a query).
    """
    if prefix:
        if not subject.startswith(prefix + "."):
            return None
        subject = subject[len(prefix) + 1 :]
    match = _SUBJECT.fullmatch(subject)
    if match is None:
        return None
    return SubjectParts(*match.groups())


def dedupe_key(tenant: str, receipt: Receipt) -> str:
    """Spec 001's ``source_deduplication_key`` for ``receipt`` (see the module docstring).

    A message id that is long or not plain printable ASCII is replaced by its SHA-256, so the
    key always fits the unique index and stays stable for every repeat of that id.
    """
    msg_id = receipt.msg_id
    if msg_id is not None:
        if not _PLAIN_ID.fullmatch(msg_id):
            msg_id = "sha256:" + hashlib.sha256(msg_id.encode("utf-8", "surrogatepass")).hexdigest()
        return f"m:{tenant}:{msg_id}"
    return f"r:{tenant}:{receipt.received_at_ns}:{receipt.stream_seq}"


def key_hash(key: str) -> str:
    """The stored form of a dedupe key: the first 128 bits of its SHA-256, as 32 hex digits
    (Postgres reads them into the ``uuid`` column ``ingest_dedupe_keys.key_hash``; migration
    0012 computes the same digest in SQL)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_DIGEST = re.compile(r"[0-9a-fA-F]{32}|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def digest_of(ident: str) -> str:
    """The digest (as :func:`key_hash` spells it) of a dedupe key, or of a digest given as
    itself: 32 hex digits, or a ``uuid``'s 36 characters as Postgres and the API print it. A
    key is never one (it starts with ``m:`` or ``r:``)."""
    if _DIGEST.fullmatch(ident):
        return ident.replace("-", "").lower()
    return key_hash(ident)


def check_size(receipt: Receipt, max_bytes: int) -> None:
    """Refuse payloads larger than ``max_bytes`` before anything parses them."""
    if len(receipt.data) > max_bytes:
        raise EnvelopeError(
            f"payload is {len(receipt.data)} bytes; the limit is {max_bytes}", code=TOO_LARGE
        )


def load_json(data: bytes) -> Any:
    """``data`` parsed as the pipeline parses a body: a number too large for a float64
    becomes a :class:`HugeNumber`; anything else orjson refuses raises :class:`EnvelopeError`
    (``ENVELOPE_UNPARSEABLE``). ``tideway schema test`` reads its payload file with this too."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not str(exc).startswith(HUGE_NUMBER_REFUSAL):
            raise EnvelopeError(f"payload is not JSON: {exc}", code=UNPARSEABLE) from None
        return _loads_huge(data)


def decode_envelope(data: bytes) -> DecodedEnvelope:
    """Parse and check one envelope body; raises :class:`EnvelopeError`."""
    # The NUL test needs the values walked only when the body holds an escape of one.
    return _checked(load_json(data), nul_possible=b"\\u0000" in data)


def check_envelope(doc: Any) -> DecodedEnvelope:
    """Check an already parsed body against the envelope contract, exactly as
    :func:`decode_envelope` checks one (``tideway schema test`` holds its sample to it, so a
    sample the pipeline would dead-letter is not reported as processed)."""
    return _checked(doc, nul_possible=True)


def _checked(doc: Any, *, nul_possible: bool) -> DecodedEnvelope:
    if type(doc) is not dict:
        raise EnvelopeError("payload is not a JSON object", code=UNPARSEABLE)
    if "ts" not in doc:
        raise EnvelopeError("ts is missing", code=INVALID)
    raw_ts = doc["ts"]
    try:
        if type(raw_ts) is int and 0 <= raw_ts <= MAX_EPOCH_MS:  # the common case, directly
            ts_us = raw_ts * 1000
            ts = EPOCH + ts_us * _US
        else:
            ts = parse_ts(raw_ts)
            ts_us = epoch_us(ts)
        seq = parse_seq(doc.get("seq"))
    except ValueError as exc:
        raise EnvelopeError(str(exc), code=INVALID) from None
    values = doc.get("values")
    if type(values) is not dict:
        raise EnvelopeError(
            "values is missing" if values is None else "values must be an object", code=INVALID
        )
    if nul_possible and has_nul(values):  # cheap test first, exact test if it hits
        raise EnvelopeError("values must not contain NUL characters", code=INVALID)
    return DecodedEnvelope(ts, ts_us, seq, values)


def _loads_huge(data: bytes) -> Any:
    """``data`` parsed as orjson parses it, except that a number too large for a float64
    becomes a :class:`HugeNumber` (the slow path: only for bodies orjson refused for that).

    The stdlib parser, given hooks for numbers, does the work; everything it accepts that
    orjson does not is refused here too, so no body gets further on this path than orjson
    would have let it: invalid UTF-8 (decoded strictly), ``NaN``/``Infinity`` (not JSON), and
    lone surrogate escapes. Numbers come out as orjson makes them: integers within
    ``[-2**63, 2**64 - 1]`` as ``int``, other integers and every fraction or exponent as a
    correctly rounded ``float``. One difference remains: the stdlib parser nests less deeply
    (the interpreter's recursion limit, about 1,000 levels, where orjson allows 1,024); a
    body nested that deeply and holding a huge number is unparseable, as before.
    """
    try:
        text = data.decode("utf-8")
        doc = json.loads(text, parse_float=_float, parse_int=_int, parse_constant=_not_json)
    except UnicodeDecodeError as exc:  # its text quotes the byte: say where it is instead
        raise EnvelopeError(f"payload is not JSON: invalid UTF-8 at byte {exc.start}",
                            code=UNPARSEABLE) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError: the kind and the position
        raise EnvelopeError(f"payload is not JSON: {exc}", code=UNPARSEABLE) from None
    # The stdlib pairs surrogate escapes as orjson does but keeps a lone one, which orjson
    # refuses (and Postgres could not store): look only when an escape of one is present.
    if "\\u" in text and _lone_surrogate(doc):
        raise EnvelopeError("payload is not JSON: lone surrogate in a string", code=UNPARSEABLE)
    return doc


def _float(literal: str) -> float | HugeNumber:
    value = float(literal)  # correctly rounded; beyond the range it is ±inf, never an error
    return value if value - value == 0.0 else HugeNumber(literal=literal)


def _int(literal: str) -> int | float | HugeNumber:
    if len(literal) <= 20:  # at most 20 digits, or a sign and 19: int() is cheap and safe
        number = int(literal)
        if _I64_MIN <= number <= _U64_MAX:
            return number
    # Beyond 64 bits orjson makes a float; float() also takes more digits than int() would.
    return _float(literal)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _lone_surrogate(doc: Any) -> bool:
    stack = [doc]
    while stack:
        node = stack.pop()
        if type(node) is str:
            if _SURROGATE.search(node):
                return True
        elif type(node) is dict:
            stack.extend(node)
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return False
