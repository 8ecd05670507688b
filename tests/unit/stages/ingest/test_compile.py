"""compile_schema refuses bad schemas, naming the file, topic and parameter of each problem."""

from __future__ import annotations

import pytest

from schemas.device_schema import SchemaFile, parse_schema_text
from stages.ingest.program import SchemaCompileError, compile_schema
from tests.unit.conftest import schema_with


def refused(parameters: str, *, topic: str = "state") -> SchemaCompileError:
    schema = parse_schema_text(schema_with(parameters, topic=topic))
    with pytest.raises(SchemaCompileError) as caught:
        compile_schema(schema, filename="fleet/station.yaml")
    return caught.value


def assert_located(error: SchemaCompileError, parameter: str, topic: str = "state") -> None:
    text = str(error)
    assert "fleet/station.yaml" in text
    assert f"topic '{topic}'" in text
    assert f"parameter '{parameter}'" in text


def test_compiles_the_issue_example(issue_schema: SchemaFile) -> None:
    programs = compile_schema(issue_schema, filename="ws.yaml")
    state = programs["state"]
    assert state.measured_names == ("temp_c", "battery_v", "door_open")
    assert state.derived_names == ("temp_f", "heat_index")
    assert [name for name, _ in state.mutations] == ["battery_v"]
    assert state.parameter("heat_index").depends_on == {"temp_f"}
    assert state.content_hash == issue_schema.content_hash()


def test_derived_parameters_follow_dependencies_then_file_order() -> None:
    schema = parse_schema_text(schema_with(
        "      - {name: c, type: number, derived: 'b + 1'}\n"
        "      - {name: b, type: number, derived: 'a * 2'}\n"
        "      - {name: a, type: number}\n"
        "      - {name: d, type: number, derived: 'a - 1'}\n"))
    assert compile_schema(schema)["state"].derived_names == ("b", "c", "d")


def test_cycle_is_refused_with_its_path() -> None:
    error = refused(
        "      - {name: a, type: number}\n"
        "      - {name: x, type: number, derived: 'z + a'}\n"
        "      - {name: y, type: number, derived: 'x * 2'}\n"
        "      - {name: z, type: number, derived: 'y - 1'}\n")
    assert error.code == "EXPR_CYCLE"
    assert_located(error, "x")
    assert "x -> z -> y -> x" in str(error)


def test_self_reference_is_a_cycle() -> None:
    error = refused("      - {name: a, type: number, derived: 'a + 1'}\n")
    assert error.code == "EXPR_CYCLE"
    assert "a -> a" in str(error)


def test_unknown_name_is_refused_with_a_suggestion() -> None:
    error = refused(
        "      - {name: temp_c, type: number}\n"
        "      - {name: temp_f, type: number, derived: 'tempc * 9 / 5 + 32'}\n")
    assert error.code == "EXPR_UNKNOWN_NAME"
    assert_located(error, "temp_f")
    assert "did you mean 'temp_c'" in str(error)
    assert "tempc * 9 / 5 + 32" in str(error)


def test_mutation_cannot_read_a_derived_parameter() -> None:
    error = refused(
        "      - {name: a, type: number, mutate: 'value + b'}\n"
        "      - {name: b, type: number, derived: 'a * 2'}\n")
    assert error.code == "EXPR_UNKNOWN_NAME"
    assert_located(error, "a")
    assert "'b' is a derived parameter" in str(error)


def test_value_is_unknown_outside_mutate() -> None:
    error = refused("      - {name: a, type: number}\n"
                    "      - {name: b, type: number, derived: 'value * 2'}\n")
    assert error.code == "EXPR_UNKNOWN_NAME"
    assert_located(error, "b")


def test_type_error_is_refused() -> None:
    error = refused(
        "      - {name: label, type: string}\n"
        "      - {name: n, type: integer, derived: 'label + 1'}\n", topic="meta")
    assert error.code == "EXPR_TYPE"
    assert_located(error, "n", topic="meta")
    assert "cannot combine string and integer" in str(error)


def test_result_type_must_match_the_declared_type() -> None:
    error = refused("      - {name: n, type: integer, mutate: 'value / 2'}\n")
    assert error.code == "EXPR_TYPE"
    assert_located(error, "n")
    assert "(mutate)" in str(error)


def test_syntax_error_is_refused() -> None:
    error = refused("      - {name: a, type: number, mutate: 'value * (2'}\n")
    assert error.code == "EXPR_SYNTAX"
    assert_located(error, "a")


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ("__import__('os').system('rm -rf /')", "EXPR_FORBIDDEN"),
        ("value.__class__", "EXPR_FORBIDDEN"),
        ("[value for _ in (1, 2)]", "EXPR_FORBIDDEN"),
        ("value ** 9 ** 9 ** 9", "EXPR_CONSTANT"),
        ("string(value) * 100000", "EXPR_TYPE"),
    ],
)
def test_hostile_expression_in_a_schema_is_refused(expression: str, code: str) -> None:
    error = refused(f"      - {{name: a, type: number, mutate: \"{expression}\"}}\n")
    assert error.code == code
    assert_located(error, "a")


def test_reserved_parameter_names_are_refused() -> None:
    error = refused("      - {name: value, type: number}\n")
    assert error.code == "SCHEMA_RESERVED_NAME"
    assert_located(error, "value")


def test_every_problem_is_listed() -> None:
    error = refused(
        "      - {name: a, type: number, mutate: 'nope'}\n"
        "      - {name: b, type: number, derived: 'a +'}\n"
        "      - {name: c, type: boolean, derived: 'a'}\n")
    assert [p.parameter for p in error.problems] == ["a", "b", "c"]
    assert [p.code for p in error.problems] == ["EXPR_UNKNOWN_NAME", "EXPR_SYNTAX", "EXPR_TYPE"]
    assert error.code == "EXPR_UNKNOWN_NAME"


def test_problems_in_several_topics_are_all_reported() -> None:
    text = ("schema: s\ntenant: acme\ntopics:\n"
            "  - {name: one, parameters: [{name: a, type: number, derived: 'zz'}]}\n"
            "  - {name: two, parameters: [{name: b, type: number, mutate: 'value +'}]}\n")
    with pytest.raises(SchemaCompileError) as caught:
        compile_schema(parse_schema_text(text), filename="f.yaml")
    assert [(p.topic, p.parameter) for p in caught.value.problems] == [("one", "a"), ("two", "b")]
