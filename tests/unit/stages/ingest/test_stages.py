"""validate → mutate → derive on single envelopes: values, issues and failures."""

from __future__ import annotations

import math
from typing import Any

import pytest

from schemas.device_schema import SchemaFile, parse_schema_text
from stages.ingest.derive import derive
from stages.ingest.mutate import mutate
from stages.ingest.program import compile_schema
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import validate
from tests.unit.conftest import schema_with


@pytest.fixture
def state(issue_schema: SchemaFile) -> TopicProgram:
    return compile_schema(issue_schema)["state"]


def program(parameters: str) -> TopicProgram:
    return compile_schema(parse_schema_text(schema_with(parameters)))["state"]


def run(prog: TopicProgram, values: Any) -> tuple[Any, Any, Any]:
    checked = validate(prog, values)
    mutated = mutate(prog, checked.extracted)
    return checked, mutated, derive(prog, mutated.values)


def test_issue_example_end_to_end(state: TopicProgram) -> None:
    checked, mutated, derived = run(state, {"temp": 30, "bat_mv": 12000, "door": True})
    assert checked.ok and checked.issues == ()
    assert checked.extracted == {"temp_c": 30.0, "battery_v": 12000.0, "door_open": True}
    assert mutated.values["battery_v"] == 12.0
    assert mutated.change_set == {"battery_v": (12000.0, 12.0)}
    assert mutated.error is None
    assert derived.derived["temp_f"] == pytest.approx(86.0)
    assert derived.derived["heat_index"] == pytest.approx(86.0 + 0.1 * 6.0)
    assert derived.final == {"temp_c": 30.0, "battery_v": 12.0, "door_open": True,
                             "temp_f": derived.derived["temp_f"],
                             "heat_index": derived.derived["heat_index"]}
    assert derived.error is None


def test_heat_index_below_eighty_is_temp_f(state: TopicProgram) -> None:
    _, _, derived = run(state, {"temp": 20.0})
    assert derived.derived == {"temp_f": 68.0, "heat_index": 68.0}


def test_missing_optional_values_stay_missing(state: TopicProgram) -> None:
    checked, mutated, derived = run(state, {"temp": 20.0})
    assert checked.ok
    assert checked.extracted["battery_v"] is None and checked.extracted["door_open"] is None
    assert mutated.values["battery_v"] is None
    assert mutated.change_set == {}
    assert derived.error is None


def test_missing_required_fails_validation(state: TopicProgram) -> None:
    checked = validate(state, {"bat_mv": 12000})
    assert not checked.ok
    [issue] = checked.issues
    assert (issue.parameter, issue.code, issue.critical) == ("temp_c", "MISSING_REQUIRED", True)
    assert validate(state, {"temp": None}).ok is False


def test_critical_out_of_range_fails(state: TopicProgram) -> None:
    checked = validate(state, {"temp": 95.5})
    assert not checked.ok
    [issue] = checked.issues
    assert (issue.code, issue.critical) == ("OUT_OF_RANGE", True)
    assert checked.extracted["temp_c"] == 95.5
    # The parameter, its source and the bound crossed; never the value (spec 000 §15).
    assert issue.message == "'temp_c' (source 'temp') is outside [-60, 80] (above it)"
    assert "95.5" not in issue.message


@pytest.mark.parametrize(("bounds", "raw", "message"), [
    ("min: 0", -51.123456789, "'a' (source 'a') is below the minimum 0"),
    ("max: 0", 51.123456789, "'a' (source 'a') is above the maximum 0"),
    ("min: -90, max: 90", -91.123456789, "'a' (source 'a') is outside [-90, 90] (below it)"),
])
def test_out_of_range_names_the_bound_crossed_not_the_value(
    bounds: str, raw: float, message: str
) -> None:
    prog = program(f"      - {{name: a, type: number, critical: true, {bounds}}}\n")
    [issue] = validate(prog, {"a": raw}).issues
    assert issue.message == message


def test_non_critical_out_of_range_is_reported_but_passes() -> None:
    prog = program("      - {name: rh, type: number, min: 0, max: 100}\n")
    checked = validate(prog, {"rh": 104.0})
    assert checked.ok
    [issue] = checked.issues
    assert (issue.code, issue.critical) == ("OUT_OF_RANGE", False)
    assert checked.extracted["rh"] == 104.0


def test_bounds_are_inclusive() -> None:
    prog = program("      - {name: rh, type: number, critical: true, min: 0, max: 100}\n")
    assert validate(prog, {"rh": 0}).ok and validate(prog, {"rh": 100}).ok
    assert not validate(prog, {"rh": 100.0001}).ok


def test_wrong_type_fails_only_required_or_critical() -> None:
    prog = program("      - {name: a, type: number, required: true}\n"
                   "      - {name: b, type: number, critical: true}\n"
                   "      - {name: c, type: number}\n")
    optional_bad = validate(prog, {"a": 1, "c": "12"})
    assert optional_bad.ok
    assert [(i.parameter, i.code, i.critical) for i in optional_bad.issues] == [
        ("c", "WRONG_TYPE", False)]
    assert optional_bad.extracted["c"] is None
    assert not validate(prog, {"a": "1"}).ok
    assert not validate(prog, {"a": 1, "b": True}).ok
    assert validate(prog, {"a": 1}).ok  # critical but absent and not required


@pytest.mark.parametrize(
    ("kind", "raw", "expected"),
    [
        ("number", 3, 3.0), ("number", 2.5, 2.5), ("integer", 7, 7), ("integer", 7.0, 7),
        ("boolean", True, True), ("boolean", 0, False), ("boolean", 1, True),
        ("string", "hi", "hi"),
    ],
)
def test_coercion_accepts(kind: str, raw: Any, expected: Any) -> None:
    prog = program(f"      - {{name: a, type: {kind}}}\n")
    extracted = validate(prog, {"a": raw}).extracted["a"]
    assert extracted == expected and type(extracted) is type(expected)


@pytest.mark.parametrize(
    ("kind", "raw", "code"),
    [
        ("number", True, "WRONG_TYPE"), ("number", "3", "WRONG_TYPE"),
        ("number", math.inf, "WRONG_TYPE"), ("number", math.nan, "WRONG_TYPE"),
        ("number", 10**400, "WRONG_TYPE"), ("integer", 7.5, "WRONG_TYPE"),
        ("integer", 2**63, "WRONG_TYPE"), ("integer", False, "WRONG_TYPE"),
        ("boolean", 2, "WRONG_TYPE"), ("boolean", "true", "WRONG_TYPE"),
        ("string", 5, "WRONG_TYPE"), ("string", "x" * 70_000, "TOO_LONG"),
        ("number", {"v": 1}, "WRONG_TYPE"), ("number", [1], "WRONG_TYPE"),
    ],
)
def test_coercion_refuses(kind: str, raw: Any, code: str) -> None:
    prog = program(f"      - {{name: a, type: {kind}}}\n")
    [issue] = validate(prog, {"a": raw}).issues
    assert issue.code == code
    # The parameter and the kind of value found, never the value itself.
    assert issue.message.startswith("'a' (source 'a'): ")
    assert repr(raw)[:20] not in issue.message


def test_dotted_source_reads_nested_objects() -> None:
    prog = program("      - {name: p, source: baro.pa, type: number}\n"
                   "      - {name: q, source: a.b.c, type: integer}\n")
    checked = validate(prog, {"baro": {"pa": 101325}, "a": {"b": 5}})
    assert checked.extracted == {"p": 101325.0, "q": None}
    assert validate(prog, {"baro.pa": 1.5}).extracted["p"] == 1.5


def test_values_that_are_not_an_object_fail() -> None:
    prog = program("      - {name: a, type: number}\n")
    checked = validate(prog, [1, 2])
    assert not checked.ok and checked.issues[0].code == "NOT_AN_OBJECT"
    assert checked.extracted == {"a": None}


def test_mutation_sees_extracted_values_not_other_mutations() -> None:
    prog = program("      - {name: a, type: number, mutate: 'value * 10'}\n"
                   "      - {name: b, type: number, mutate: 'value + a'}\n")
    mutated = mutate(prog, validate(prog, {"a": 1, "b": 2}).extracted)
    assert mutated.values == {"a": 10.0, "b": 3.0}


def test_mutation_can_default_a_missing_value() -> None:
    prog = program("      - {name: a, type: number, mutate: 'coalesce(value, -1)'}\n")
    mutated = mutate(prog, validate(prog, {}).extracted)
    assert mutated.values == {"a": -1.0}
    assert mutated.change_set == {"a": (None, -1.0)}


def test_unchanged_values_are_not_in_the_change_set() -> None:
    prog = program("      - {name: a, type: number, mutate: 'clamp(value, 0, 100)'}\n")
    assert mutate(prog, {"a": 50.0}).change_set == {}
    assert mutate(prog, {"a": 150.0}).change_set == {"a": (150.0, 100.0)}


def test_mutation_failure_is_reported_not_raised() -> None:
    prog = program("      - {name: a, type: number, mutate: 'value / b'}\n"
                   "      - {name: b, type: number}\n")
    mutated = mutate(prog, {"a": 1.0, "b": 0.0})
    assert mutated.error is not None
    assert (mutated.error.parameter, mutated.error.code) == ("a", "EVAL_DIVISION_BY_ZERO")


def test_derive_failure_is_reported_with_values_so_far() -> None:
    prog = program("      - {name: a, type: number}\n"
                   "      - {name: b, type: number, derived: 'a * 2'}\n"
                   "      - {name: c, type: number, derived: 'sqrt(b)'}\n"
                   "      - {name: d, type: number, derived: 'c + 1'}\n")
    result = derive(prog, {"a": -1.0})
    assert result.error is not None
    assert (result.error.parameter, result.error.code) == ("c", "EVAL_DOMAIN")
    assert result.derived == {"b": -2.0}


def test_derived_chain_cannot_grow_strings_without_bound() -> None:
    chain = "".join(f"      - {{name: s{i}, type: string, derived: 's{i - 1} + s{i - 1}'}}\n"
                    for i in range(1, 40))
    prog = program("      - {name: s0, type: string}\n" + chain)
    result = derive(prog, {"s0": "x" * 1000})
    assert result.error is not None and result.error.code == "EVAL_STRING_TOO_LONG"


def test_derived_over_missing_input_is_missing() -> None:
    prog = program("      - {name: a, type: number}\n"
                   "      - {name: b, type: number, derived: 'a * 2'}\n"
                   "      - {name: c, type: number, derived: 'coalesce(b, 0) + 1'}\n")
    assert derive(prog, {"a": None}).derived == {"b": None, "c": 1.0}
