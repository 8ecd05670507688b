"""Numbers too large for a 64-bit float: valid JSON, so a bad value, never an unparseable body.

``1e309``, ``-1e309`` or 400 written-out digits used to make the whole envelope
``ENVELOPE_UNPARSEABLE`` (orjson refuses them) and dead-lettered. Now the decoder keeps them as
:class:`HugeNumber`, the parameter reading one reports ``NUMBER_TOO_LARGE`` and the
required/critical rules decide, on the fast path and the reference path alike.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.device_schema import parse_schema_text
from schemas.envelope import Envelope, HugeNumber
from stages.ingest.ingress import HUGE_NUMBER_REFUSAL, EnvelopeError, decode_envelope
from stages.ingest.program import compile_schema
from stages.ingest.status import Status
from stages.ingest.validate import validate
from tests.unit.stages.ingest.test_envelope import _validator
from tests.unit.stages.ingest.test_evaluate import GOOD_VALUES
from tests.unit.stages.ingest.test_fast_path import _KEYS, CLEAN, _assert_same, _both, _receipt

DIGITS_400 = "1" + "0" * 400  # 10**400 written out
HUGE = ["1e309", "-1e309", "1E400", "2.5e+999", DIGITS_400, "-" + DIGITS_400,
        "17976931348623159e292"]  # the last: just past the largest float, after rounding


def _body(values: str, *, ts: str = "1", seq: str | None = None) -> bytes:
    seq_field = "" if seq is None else f', "seq": {seq}'
    return f'{{"ts": {ts}{seq_field}, "values": {values}}}'.encode()


@pytest.mark.parametrize("literal", HUGE)
def test_orjson_refuses_these_numbers_with_the_message_the_decoder_recognises(
        literal: str) -> None:
    with pytest.raises(orjson.JSONDecodeError) as info:
        orjson.loads(literal)
    assert str(info.value).startswith(HUGE_NUMBER_REFUSAL)


@pytest.mark.parametrize("literal", HUGE)
def test_a_huge_number_in_values_is_kept_as_such_not_unparseable(literal: str) -> None:
    decoded = decode_envelope(_body(f'{{"v": {literal}, "w": 1.5, "n": {{"x": [{literal}, 3]}}}}'))
    assert decoded.values == {"v": HugeNumber(literal=literal), "w": 1.5,
                              "n": {"x": [HugeNumber(literal=literal), 3]}}
    assert str(decoded.values["v"]) == literal


def test_a_huge_number_is_an_immutable_value_written_as_its_literal() -> None:
    huge = HugeNumber(literal=DIGITS_400)
    assert huge == HugeNumber(literal=DIGITS_400) != HugeNumber(literal="1e309")
    assert huge != float("inf") and hash(huge) == hash(HugeNumber(literal=DIGITS_400))
    assert copy.deepcopy(huge) == pickle.loads(pickle.dumps(huge)) == huge
    with pytest.raises(AttributeError):
        huge.literal = "1"  # type: ignore[misc]
    assert str(huge) == DIGITS_400 and huge.shown == "100000000000… (401 characters)"
    # Stage snapshots are encoded with default=str: the number appears as written.
    assert orjson.dumps({"v": huge}, default=str) == b'{"v":"' + DIGITS_400.encode() + b'"}'


def test_numbers_that_fit_a_float_stay_numbers_as_before() -> None:
    big = "1" + "0" * 300  # 10**300 fits a float64
    for extra in ("", ', "h": 1e309'):
        decoded = decode_envelope(_body(
            f'{{"a": {big}, "b": 18446744073709551615, "c": 18446744073709551616, "d": -0, '
            f'"e": 1e-400{extra}}}'))
        values = decoded.values
        assert (values["a"], values["b"], values["c"]) == (1e300, 2**64 - 1, 2.0**64)
        assert type(values["b"]) is int and type(values["c"]) is float
        assert values["d"] == 0 and type(values["d"]) is int and values["e"] == 0.0


_NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?\Z")
_LITERALS = st.one_of(_NUMBER, st.integers(-(2**70), 2**70).map(str),
                      st.floats(allow_nan=False, allow_infinity=False).map(repr))


@settings(max_examples=300, deadline=None)
@given(literals=st.lists(_LITERALS, max_size=12),
       text=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10))
def test_the_slow_parse_reads_every_other_value_exactly_as_orjson(literals: list[str],
                                                                   text: str) -> None:
    # (The text holds no NUL, which values refuse, nor surrogates, which orjson cannot write.)
    # One huge number forces the fallback; every other value must come out as orjson makes
    # it (int or float, the same float bits) — or be huge itself.
    numbers = ", ".join([*literals, "1e309"])
    body = _body(f'{{"n": [{numbers}], "s": {orjson.dumps(text).decode()}}}')
    decoded = decode_envelope(body)
    assert decoded.values["s"] == text
    *got, last = decoded.values["n"]
    assert last == HugeNumber(literal="1e309")
    for literal, value in zip(literals, got, strict=True):
        try:
            expected: Any = orjson.loads(literal)
        except orjson.JSONDecodeError:
            assert value == HugeNumber(literal=literal)
            continue
        assert (type(value), repr(value)) == (type(expected), repr(expected))


@pytest.mark.parametrize("values", [
    '{"v": 1e309, "w": NaN}', '{"v": 1e309, "w": Infinity}', '{"v": 1e309, "w": -Infinity}',
    '{"v": 1e309, "w": "\\ud800"}', '{"v": 1e309, "w": "\\udc00x"}', '{"v": 1e309, "\\ud800": 1}',
    '{"v": 1e309, "w": [1,]}', '{"v": 1e309, "w": 01}', '{"v": 1e309} trailing', '{"v": 1e309',
    '{"v": 1e309, "w": "tab\there"}',
])
def test_what_is_not_json_stays_unparseable_behind_a_huge_number(values: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(_body(values))
    assert info.value.code == "ENVELOPE_UNPARSEABLE"


def test_nan_and_infinity_literals_alone_are_still_unparseable() -> None:
    for literal in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(EnvelopeError) as info:
            decode_envelope(_body(f'{{"v": {literal}}}'))
        assert info.value.code == "ENVELOPE_UNPARSEABLE"


def test_paired_surrogate_escapes_and_nul_checks_still_work_on_the_slow_path() -> None:
    decoded = decode_envelope(_body('{"v": 1e309, "e": "\\ud83d\\ude00"}'))
    assert decoded.values["e"] == "\U0001f600"
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(_body('{"v": 1e309, "e": "a\\u0000b"}'))
    assert info.value.code == "ENVELOPE_INVALID"


@pytest.mark.parametrize("literal", HUGE)
def test_a_huge_ts_or_seq_breaks_the_contract_in_model_schema_and_decoder(literal: str) -> None:
    for body in (_body("{}", ts=literal), _body("{}", seq=literal)):
        with pytest.raises(EnvelopeError) as info:
            decode_envelope(body)
        assert info.value.code == "ENVELOPE_INVALID"
        with pytest.raises(ValidationError):
            Envelope.model_validate_json(body)
        assert not _validator().is_valid(json.loads(body))


@pytest.mark.parametrize("literal", HUGE)
def test_a_huge_value_is_a_valid_envelope_for_model_schema_and_decoder(literal: str) -> None:
    body = _body(f'{{"v": {literal}}}')
    assert decode_envelope(body).values == {"v": HugeNumber(literal=literal)}
    assert "v" in Envelope.model_validate_json(body).values
    assert _validator().is_valid(json.loads(body))
    # A huge number outside values (an ignored field) changes nothing either.
    assert decode_envelope(body[:-1] + f', "other": {literal}}}'.encode()).values == {
        "v": HugeNumber(literal=literal)}


PROGRAM = compile_schema(parse_schema_text(
    "schema: huge\ntenant: acme\ntopics:\n  - name: t\n    parameters:\n"
    "      - {name: n_opt, source: a, type: number, min: 0, max: 10}\n"
    "      - {name: n_crit, source: b, type: number, critical: true}\n"
    "      - {name: n_req, source: c, type: number, required: true}\n"
    "      - {name: i_opt, source: d, type: integer}\n"
    "      - {name: s_opt, source: e, type: string}\n"
    "      - {name: f_opt, source: f, type: boolean}\n"
))["t"]
_FINE = {"a": 1, "b": 2.5, "c": 3, "d": 4, "e": "x", "f": True}


@pytest.mark.parametrize(("key", "code", "fails"), [
    ("a", "NUMBER_TOO_LARGE", False),  # optional, not critical: flagged, envelope fine
    ("b", "NUMBER_TOO_LARGE", True),  # critical
    ("c", "NUMBER_TOO_LARGE", True),  # required
    ("d", "NUMBER_TOO_LARGE", False),
    ("e", "WRONG_TYPE", False),  # a number where a string is expected, as for any number
    ("f", "WRONG_TYPE", False),
])
def test_validate_reports_a_huge_number_as_a_bad_value_of_its_parameter(
        key: str, code: str, fails: bool) -> None:
    huge = HugeNumber(literal="-" + DIGITS_400)
    checked = validate(PROGRAM, {**_FINE, key: huge})
    assert checked.ok is not fails
    (issue,) = checked.issues
    assert (issue.code, issue.critical) == (code, fails)
    name = next(n for n, k, *_ in PROGRAM.extractors if k == key)
    assert issue.parameter == name and checked.extracted[name] is None
    assert len(issue.message) < 120
    assert DIGITS_400[:6] not in issue.message  # the parameter and the kind, not the number
    assert PROGRAM.fast is not None and PROGRAM.fast.validate({**_FINE, key: huge}) is None


def _with_huge(values: dict[str, Any], key: str, literal: str) -> bytes:
    marker = "@@huge@@"
    body = orjson.dumps({"ts": 1_700_000_000_000, "values": {**values, key: marker}})
    return body.replace(b'"' + marker.encode() + b'"', literal.encode())


@pytest.mark.parametrize("literal", ["1e309", "-" + DIGITS_400])
def test_fast_and_full_evaluation_agree_with_a_huge_number_in_any_field(literal: str) -> None:
    for key in (*_KEYS, "unread"):
        fast, full = _both(_receipt("f1", "t", _with_huge(CLEAN, key, literal)))
        _assert_same(fast, full)
        assert not fast.dead_letter and fast.error_code != "ENVELOPE_UNPARSEABLE"
    fast, full = _both(_receipt("f1", "t", _with_huge(CLEAN, "w", f'{{"x": {literal}}}')))
    _assert_same(fast, full)


@pytest.mark.parametrize(("key", "status", "parameter"), [
    ("rh", Status.COMPLETED, "humidity"),  # optional, not critical
    ("temp", Status.FAILED_VALIDATION, "temp_c"),  # required and critical
    ("unread", Status.COMPLETED, None),  # no parameter reads it
])
def test_the_required_and_critical_rules_decide_the_status(key: str, status: Status,
                                                           parameter: str | None) -> None:
    for literal in ("1e309", "-1e309", DIGITS_400):
        fast, full = _both(_receipt("d1", "state", _with_huge(GOOD_VALUES, key, literal)))
        _assert_same(fast, full)
        assert fast.status is status and not fast.dead_letter
        assert [(i.parameter, i.code) for i in fast.issues] == (
            [] if parameter is None else [(parameter, "NUMBER_TOO_LARGE")])
        if parameter is not None:
            assert fast.values is not None and fast.values[parameter] is None


def test_a_huge_ts_is_a_malformed_envelope_on_both_paths() -> None:
    body = b'{"ts": 1e309, "values": {"temp": 20}}'
    fast, full = _both(_receipt("d1", "state", body))
    _assert_same(fast, full)
    assert (fast.status, fast.error_code, fast.dead_letter) == (
        Status.FAILED_TERMINAL, "ENVELOPE_INVALID", True)
