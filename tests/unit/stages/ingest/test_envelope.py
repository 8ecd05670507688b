"""The envelope contract: pydantic model, JSON Schema file and hot-path decoder agree."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.envelope import SCHEMA_PATH, Envelope, json_schema
from stages.ingest.ingress import EnvelopeError, decode_envelope


def _validator() -> Any:
    """The file's JSON Schema as a validator (jsonschema and its RFC 3339 check are test-only
    dependencies: without them the schema-side assertions are skipped)."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("rfc3339_validator")
    return jsonschema.Draft202012Validator(
        json.loads(SCHEMA_PATH.read_text()), format_checker=jsonschema.FormatChecker()
    )


GOOD: list[dict[str, Any]] = [
    {"ts": "2026-05-01T12:00:00Z", "values": {}},
    {"ts": "2026-05-01T12:00:00.250+02:00", "seq": 7, "values": {"temp": 21.5}},
    {"ts": "2026-05-01t12:00:00.123456789z", "values": {"a": {"b": [1, 2]}}},
    {"ts": 1_777_636_800_250, "seq": 0, "values": {"door": True}, "extra": "ignored"},
    {"ts": 0, "seq": None, "values": {"s": "x"}},
    {"ts": 1.7e12, "seq": 3.0, "values": {}},
]
BAD: list[Any] = [
    {"values": {}},
    {"ts": "2026-05-01", "values": {}},
    {"ts": "2026-05-01T12:00:00", "values": {}},
    {"ts": "2026-05-01 12:00:00Z", "values": {}},
    {"ts": "2026-05-01T12:00:00+0200", "values": {}},
    {"ts": "yesterday", "values": {}},
    {"ts": 1.5e12 + 0.5, "values": {}},
    {"ts": True, "values": {}},
    {"ts": -1, "values": {}},
    {"ts": 253_402_300_800_000, "values": {}},
    {"ts": 1, "values": []},
    {"ts": 1, "values": "x"},
    {"ts": 1},
    {"ts": 1, "seq": -1, "values": {}},
    {"ts": 1, "seq": 1.5, "values": {}},
    {"ts": 1, "seq": 2.0**63, "values": {}},
    {"ts": 1, "seq": "3", "values": {}},
    {"ts": 1, "seq": True, "values": {}},
    [1, 2],
    "envelope",
]


def test_schema_file_is_generated_from_the_model() -> None:
    on_disk = json.loads(SCHEMA_PATH.read_text())
    assert on_disk == json_schema(), "run: python -m schemas.envelope"


@pytest.mark.parametrize("doc", GOOD)
def test_good_envelopes_pass_all_three(doc: dict[str, Any]) -> None:
    model = Envelope.model_validate_json(orjson.dumps(doc))
    decoded = decode_envelope(orjson.dumps(doc))
    assert decoded.ts == model.ts and decoded.ts_us == model.ts_us
    assert decoded.seq == model.seq and decoded.values == model.values == doc["values"]
    assert decoded.ts.tzinfo is not None


@pytest.mark.parametrize("doc", BAD)
def test_bad_envelopes_fail_all_three(doc: Any) -> None:
    with pytest.raises(ValidationError):
        Envelope.model_validate_json(orjson.dumps(doc))
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(orjson.dumps(doc))
    assert info.value.code in {"ENVELOPE_INVALID", "ENVELOPE_UNPARSEABLE"}


@pytest.mark.parametrize(("doc", "valid"), [(d, True) for d in GOOD] + [(d, False) for d in BAD])
def test_the_json_schema_accepts_exactly_the_good_examples(doc: Any, valid: bool) -> None:
    assert _validator().is_valid(doc) is valid


@pytest.mark.parametrize("ts", ["1969-12-31T23:59:59.999Z", "1970-01-01T01:00:00+02:00",
                                "0001-01-01T00:00:00Z"])
def test_date_times_before_the_epoch_are_refused_like_negative_milliseconds(ts: str) -> None:
    # (The JSON Schema's date-time format cannot say so; its description does.)
    doc = orjson.dumps({"ts": ts, "values": {}})
    with pytest.raises(ValidationError):
        Envelope.model_validate_json(doc)
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(doc)
    assert info.value.code == "ENVELOPE_INVALID" and "1970" in str(info.value)


def test_the_epoch_itself_is_accepted_either_way() -> None:
    a = decode_envelope(b'{"ts": "1970-01-01T01:00:00+01:00", "values": {}}')
    b = decode_envelope(b'{"ts": 0, "values": {}}')
    assert a.ts_us == b.ts_us == 0


def test_epoch_milliseconds_and_offsets_mean_the_same_instant() -> None:
    a = decode_envelope(b'{"ts": 1777636800250, "values": {}}')
    b = decode_envelope(b'{"ts": "2026-05-01T14:00:00.25+02:00", "values": {}}')
    assert a.ts == b.ts == datetime(2026, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    assert a.ts_us == 1_777_636_800_250_000


def test_not_json_is_unparseable() -> None:
    for data in (b"", b"{", b"\xff\xfe", b"null"):
        with pytest.raises(EnvelopeError) as info:
            decode_envelope(data)
        assert info.value.code == "ENVELOPE_UNPARSEABLE"


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)


def _json_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A named function: hypothesis inspects the source of ``extend`` and cannot always find a
    # multi-line lambda's, which makes it warn (an error here) that the strategy never recurses.
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)


json_value = st.recursive(json_leaf, _json_containers, max_leaves=8)
ts_value = st.one_of(
    st.integers(-10, 253_402_300_800_010),
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    st.from_regex(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})\Z"),
    json_value,
)
envelope_like = st.fixed_dictionaries(
    {},
    optional={
        "ts": ts_value,
        "seq": st.one_of(st.none(), st.integers(-5, 2**63 - 1), json_value),
        "values": st.one_of(
            st.dictionaries(st.text(max_size=5), json_value, max_size=4), json_value
        ),
        "other": json_value,
    },
)


@settings(max_examples=400, deadline=None)
@given(envelope_like)
def test_decoder_and_model_agree(doc: dict[str, Any]) -> None:
    data = orjson.dumps(doc)
    try:
        model: Envelope | None = Envelope.model_validate_json(data)
    except ValidationError:
        model = None
    try:
        decoded = decode_envelope(data)
    except EnvelopeError:
        decoded = None
    assert (model is None) == (decoded is None)
    if model is not None and decoded is not None:
        assert (decoded.ts, decoded.seq, decoded.values) == (model.ts, model.seq, model.values)


@settings(max_examples=300, deadline=None)
@given(envelope_like)
def test_the_json_schema_agrees_with_the_model(doc: dict[str, Any]) -> None:
    validator = _validator()
    try:
        Envelope.model_validate_json(orjson.dumps(doc))
    except ValidationError:
        # The JSON Schema cannot express "a real calendar date" beyond RFC 3339's grammar.
        if not isinstance(doc.get("ts"), str):
            assert not validator.is_valid(doc)
        return
    assert validator.is_valid(doc)
