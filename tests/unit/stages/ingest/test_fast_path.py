"""The specialised stages (``TopicProgram.fast``) agree with the general ones, envelope by envelope.

``evaluate`` runs a topic's generated validate/mutate/derive for clean envelopes and falls
back to the general stages, then to ``evaluate_fully``, for anything else. These tests feed
both paths many random envelopes — missing, null, out-of-range, wrong-type, oversized and NUL
values, integral floats, ``-0.0``, nested and dotted paths, expressions that fail — and demand
identical results, down to the JSON of the values (key order, ``1`` vs ``1.0`` vs ``true``).
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.device_schema import parse_schema_text
from stages.expr.limits import MAX_STRING_LENGTH
from stages.ingest import evaluate as evaluate_module
from stages.ingest.derive import derive
from stages.ingest.evaluate import (
    DeviceRecord,
    Evaluation,
    Registry,
    StageLog,
    TopicBinding,
    evaluate,
    evaluate_fully,
)
from stages.ingest.ingress import Receipt, parse_subject
from stages.ingest.mutate import mutate
from stages.ingest.program import compile_schema
from stages.ingest.status import Status
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import validate
from streams.ingest.fleet import Station, choose_kind, demo_schema_text

FUZZ_SCHEMA = """\
schema: fuzz
tenant: acme
topics:
  - name: t
    parameters:
      - {name: n_req, source: a, type: number, required: true, critical: true, min: -10, max: 10}
      - {name: n_low, source: b, type: number, min: 0}
      - {name: n_high, source: c, type: number, max: 5, critical: true}
      - {name: n_inv, source: d, type: number, mutate: "1 / value"}
      - {name: i_req, source: e, type: integer, required: true, min: 0, max: 360}
      - {name: i_free, source: f, type: integer}
      - {name: i_low, source: f2, type: integer, min: -1.5}
      - {name: i_wide, source: f3, type: integer, min: -100000000000000000000000,
         max: 100000000000000000000000}
      - {name: flag, source: g, type: boolean, required: true}
      - {name: flag_not, source: h, type: boolean, mutate: "not value"}
      - {name: label, source: s, type: string}
      - {name: label_req, source: s2, type: string, required: true, critical: true}
      - {name: nested, source: w.x, type: number, min: 0}
      - {name: deep, source: p.q.r, type: integer}
      - {name: zeroed, source: z, type: number, mutate: "value * 0"}
      - {name: counted, source: cc, type: integer, mutate: "coalesce(value, 0)"}
      - {name: same, source: sm, type: number, mutate: "value + 0"}
      - {name: root, type: number, derived: "sqrt(n_req)"}
      - {name: shifted, type: number, derived: "root + n_low"}
      - {name: joined, type: string, derived: "label + label_req"}
"""
DEMO = compile_schema(parse_schema_text(demo_schema_text("acme")))
FUZZ = compile_schema(parse_schema_text(FUZZ_SCHEMA))
VERSION, FUZZ_VERSION = uuid.uuid4(), uuid.uuid4()


def _device(external_id: str, version: uuid.UUID, *, active: bool = True) -> DeviceRecord:
    return DeviceRecord(id=uuid.uuid4(), tenant_id=uuid.uuid4(), tenant="acme",
                        external_id=external_id, active=active, schema_version_id=version)


def _bindings(version: uuid.UUID, programs: dict[str, TopicProgram]
              ) -> dict[tuple[uuid.UUID, str], TopicBinding]:
    return {(version, name): TopicBinding(schema_version_id=version,
                                          schema_topic_id=uuid.uuid4(), program=program)
            for name, program in programs.items()}


REGISTRY = Registry(
    devices={("acme", "d1"): _device("d1", VERSION), ("acme", "off"): _device("off", VERSION,
                                                                             active=False),
             ("acme", "f1"): _device("f1", FUZZ_VERSION),
             ("acme", "foff"): _device("foff", FUZZ_VERSION, active=False)},
    topics={**_bindings(VERSION, DEMO), **_bindings(FUZZ_VERSION, FUZZ)},
)


def _receipt(device: str, topic: str, data: bytes, msg_id: str | None = "m-1") -> Receipt:
    return Receipt.of(subject=f"telemetry.acme.{device}.{topic}", data=data,
                      headers={"Nats-Msg-Id": msg_id} if msg_id else None, stream_seq=3,
                      received_at_ns=1_700_000_000_000_000_123)


def _both(receipt: Receipt) -> tuple[Evaluation, Evaluation]:
    fast = evaluate(receipt, REGISTRY, prefix="", max_payload_bytes=1 << 20, capture=False,
                    clock=lambda: 0)
    full = evaluate_fully(receipt, REGISTRY, parts=parse_subject(receipt.subject),
                          max_payload_bytes=1 << 20, capture=False, clock=lambda: 0)
    return fast, full


def _assert_same(fast: Evaluation, full: Evaluation) -> None:
    assert fast == full
    # ``==`` on dicts calls 1 == 1.0 == True and 0.0 == -0.0; the JSON tells them apart.
    assert fast.values_json == full.values_json
    assert type(fast) is Evaluation and all(type(log) is StageLog for log in fast.logs)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xqrk"), inner,
                                                         max_size=3)


EDGES: list[Any] = [
    None, 0, 1, -1, 2, 360, 361, 5, 10, -10, 11, 0.0, -0.0, 1.0, 270.0, 5.0, 5.000001,
    -10.000001, 10.5, -1.5, -2, 1e308, -1e308, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), True, False,
    "", "a\x00b", "x" * (MAX_STRING_LENGTH + 1), "x" * MAX_STRING_LENGTH, [], [1], {}, {"x": 1},
    {"q": {"r": 2}}, {"q": {"r": 2.0}}, {"q": [1]},
]
_edges = st.sampled_from(EDGES)
_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4) | _edges)
json_values = st.recursive(_scalars, _containers, max_leaves=6)
_KEYS = ("a", "b", "c", "d", "e", "f", "f2", "f3", "g", "h", "s", "s2", "z", "cc", "sm", "w.x",
         "p.q.r", "w", "p", "extra")
_nested = st.fixed_dictionaries({}, optional={"x": json_values, "q": json_values,
                                              "r": json_values})
fuzz_values = st.fixed_dictionaries({}, optional={
    key: json_values for key in (*_KEYS[:-3], "extra")
} | {"w": json_values | _nested, "p": json_values | st.fixed_dictionaries(
    {}, optional={"q": json_values | _nested})})
# Mostly clean envelopes, so the fast path itself is exercised as much as its fallbacks.
clean_fuzz = st.fixed_dictionaries({
    "a": st.floats(min_value=-10, max_value=10) | st.integers(-10, 10),
    "e": st.integers(0, 360), "g": st.booleans() | st.sampled_from([0, 1]),
    "s2": st.text(max_size=3),
}, optional={
    "b": st.floats(min_value=0, max_value=1e9) | st.integers(0, 10**6) | st.none(),
    "c": st.floats(max_value=5, allow_infinity=False) | st.none(),
    "d": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-5, 5),
    "f": st.integers(-(2**63), 2**63 - 1), "f2": st.integers(-1, 10**9),
    "h": st.booleans(), "s": st.text(max_size=3) | st.none(),
    "w": st.fixed_dictionaries({"x": st.floats(0, 100) | st.integers(0, 5)}) | st.none(),
    "w.x": st.floats(0, 100), "p": st.fixed_dictionaries({"q": st.fixed_dictionaries(
        {"r": st.integers(-5, 5)})}),
    "z": st.floats(-3, 3), "cc": st.none() | st.integers(0, 9),
    "sm": st.floats(-3, 3) | st.just(-0.0),
})

def _spoil(clean: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**clean, key: value}


# A clean envelope with one value replaced: every check's edge, one at a time.
nearly_clean = st.builds(_spoil, clean_fuzz, st.sampled_from(_KEYS), _edges | json_values)


@settings(max_examples=800, deadline=None)
@given(values=fuzz_values | clean_fuzz | nearly_clean,
       device=st.sampled_from(["f1", "f1", "f1", "foff"]), seq=st.none() | st.integers(0, 9))
def test_fast_and_full_agree_on_random_envelopes(values: dict[str, Any], device: str,
                                                 seq: int | None) -> None:
    payload: dict[str, Any] = {"ts": 1_700_000_000_000, "values": values}
    if seq is not None:
        payload["seq"] = seq
    _assert_same(*_both(_receipt(device, "t", orjson.dumps(payload))))

CLEAN = {"a": 4, "b": 1.5, "c": -2.0, "d": 3, "e": 90, "f": 7, "f2": 0, "f3": 1, "g": 1,
         "h": False, "s": "lab", "s2": "el", "w": {"x": 2}, "p": {"q": {"r": 3}}, "z": -1.0,
         "cc": None, "sm": -0.0}


def test_every_edge_value_in_every_field_agrees() -> None:
    fast, full = _both(_receipt("f1", "t", orjson.dumps({"ts": 1, "values": CLEAN})))
    _assert_same(fast, full)
    assert fast.status is Status.COMPLETED and not fast.issues
    for key in _KEYS:
        for edge in EDGES:
            values = {**CLEAN, key: edge}
            _assert_same(*_both(_receipt("f1", "t", orjson.dumps({"ts": 1, "values": values}))))
            if key not in ("w", "p"):
                values.pop(key)
                _assert_same(*_both(_receipt("f1", "t", orjson.dumps({"ts": 1,
                                                                      "values": values}))))


@settings(max_examples=300, deadline=None)
@given(values=json_values | fuzz_values | nearly_clean)
def test_specialised_validate_is_validate_with_no_issues(values: Any) -> None:
    program = FUZZ["t"]
    assert program.fast is not None
    if not isinstance(values, dict):
        return  # decode_envelope hands the stages objects only
    checked = validate(program, values)
    fast = program.fast.validate(values)
    if fast is not None:
        assert checked.ok and checked.issues == ()
        assert [(k, type(v), repr(v)) for k, v in fast.items()] == [
            (k, type(v), repr(v)) for k, v in checked.extracted.items()]
        assert fast is not values


@settings(max_examples=300, deadline=None)
@given(values=clean_fuzz)
def test_specialised_mutate_and_derive_match_the_stages(values: dict[str, Any]) -> None:
    program = FUZZ["t"]
    assert program.fast is not None
    extracted = program.fast.validate(values)
    assert extracted is not None  # a clean envelope takes the fast path
    expected = validate(program, values).extracted
    mutated = mutate(program, expected)
    derived = derive(program, mutated.values) if mutated.error is None else None
    working = dict(extracted)
    try:
        program.fast.mutate(working)
        after_mutate = dict(working)
        program.fast.derive(working)
    except Exception:
        assert mutated.error is not None or (derived is not None and derived.error is not None)
        return
    assert mutated.error is None and derived is not None and derived.error is None
    assert orjson.dumps(after_mutate) == orjson.dumps(mutated.values)
    assert orjson.dumps(working) == orjson.dumps(derived.final)
    assert extracted == expected  # mutate reads, and the copy it was given is untouched


def test_realistic_fleet_envelopes_agree_and_clean_ones_take_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    stations = [Station(i, rng) for i in range(20)]
    general_calls = 0
    reference = evaluate_module.validate

    def counting(program: TopicProgram, values: Any) -> Any:
        nonlocal general_calls
        general_calls += 1
        return reference(program, values)

    monkeypatch.setattr(evaluate_module, "validate", counting)
    for n in range(600):
        kind = choose_kind(rng, late=0.0, invalid=0.1, unknown_topic=0.05)
        sim = stations[n % len(stations)].envelope(1_700_000_000_000 + n * 1000, rng, kind=kind)
        if kind == "normal" and n % 3 == 0:
            sim.payload["values"]["rh"] = 140  # a non-critical issue: the general stages
        payload = orjson.dumps(sim.payload)
        for device in ("d1", "off"):
            before = general_calls
            fast, full = _both(_receipt(device, sim.topic, payload, msg_id=sim.msg_id))
            _assert_same(fast, full)
            if kind == "normal" and device == "d1":
                assert fast.status is Status.COMPLETED
                # A clean envelope never reaches the general validate but in evaluate_fully.
                fast_only = evaluate(_receipt(device, sim.topic, payload), REGISTRY, prefix="",
                                     max_payload_bytes=65536, capture=False, clock=lambda: 0)
                assert fast_only.status is Status.COMPLETED
                clean = "rh" not in sim.payload["values"] or sim.payload["values"]["rh"] <= 100
                assert (general_calls - before == 1) == clean  # only evaluate_fully's call


def test_stage_durations_are_measured_on_the_fast_path() -> None:
    ticks = iter(range(0, 10**9, 1000))
    station = Station(0, random.Random(1))
    payload = orjson.dumps(station.envelope(1_700_000_000_000, random.Random(2)).payload)
    ev = evaluate(_receipt("d1", "state", payload), REGISTRY, prefix="", max_payload_bytes=65536,
                  capture=False, clock=lambda: next(ticks))
    assert ev.status is Status.COMPLETED and not ev.issues
    # One clock read before ingress and one after each stage: 1 µs per stage.
    assert [(log.stage, log.duration_us) for log in ev.logs] == [
        ("ingress", 1), ("validate", 1), ("mutate", 1), ("derive", 1)]
    assert next(ticks) == 5000


@pytest.mark.parametrize("steps", [[3, 1024, 0, 2_000_000], [5, -2, 1, 1], [1023, 1023, 1023, 0]])
def test_every_duration_is_recorded_as_measured(steps: list[int]) -> None:
    reads = iter([0, *(sum(steps[: i + 1]) * 1000 for i in range(4))])
    station = Station(0, random.Random(1))
    payload = orjson.dumps(station.envelope(1_700_000_000_000, random.Random(2)).payload)
    ev = evaluate(_receipt("d1", "state", payload), REGISTRY, prefix="", max_payload_bytes=65536,
                  capture=False, clock=lambda: next(reads))
    assert ev.logs == tuple(StageLog(stage, "ok", us) for stage, us in
                            zip(("ingress", "validate", "mutate", "derive"), steps, strict=True))


@pytest.mark.parametrize("values", [
    {"temp": 150.0},  # out of range and critical
    {"temp": "21"},  # wrong type
    {"temp": True},  # a boolean is not a number
    {"temp": 21.5, "wind": {"dir": 270.0}},  # an integral float: validate takes it, fast not
    {"temp": 21.5, "wind": [1]},  # a path through an array
    {"temp": 21.5, "wind.speed": 4, "wind": {"speed": 9}},  # the dotted key wins
    {"temp": 21.5, "door": 2},
    {"temp": 21.5, "fw": "x" * (MAX_STRING_LENGTH + 1)},
])
def test_specialised_validate_declines_or_matches(values: dict[str, Any]) -> None:
    program = DEMO["state"]
    assert program.fast is not None
    checked = validate(program, values)
    fast = program.fast.validate(values)
    if fast is None:
        assert not checked.ok or checked.issues or values.get("wind") == {"dir": 270.0}
    else:
        assert checked.ok and not checked.issues and fast == checked.extracted
    _assert_same(*_both(_receipt("d1", "state", orjson.dumps({"ts": 1, "values": values}))))


def test_programs_compare_without_their_fast_path() -> None:
    again = compile_schema(parse_schema_text(demo_schema_text("acme")))["state"]
    assert again.fast is not DEMO["state"].fast
    assert again.extractors[0][:3] == DEMO["state"].extractors[0][:3]
    assert "fast" not in repr(again)


def test_a_program_without_a_fast_path_runs_the_general_stages() -> None:
    general = dataclasses.replace(DEMO["state"], fast=None)
    registry = Registry(devices=REGISTRY.devices,
                        topics={**REGISTRY.topics, **_bindings(VERSION, {"state": general})})
    station = Station(0, random.Random(3))
    for n in range(20):
        payload = orjson.dumps(station.envelope(1_700_000_000_000 + n, random.Random(n)).payload)
        receipt = _receipt("d1", "state", payload)
        fast = evaluate(receipt, registry, prefix="", max_payload_bytes=65536, capture=False,
                        clock=lambda: 0)
        full = evaluate_fully(receipt, registry, parts=parse_subject(receipt.subject),
                              max_payload_bytes=65536, capture=False, clock=lambda: 0)
        _assert_same(fast, full)
        assert fast.status is Status.COMPLETED
        assert fast == _both(receipt)[0]._replace(binding=fast.binding)
