"""The schema-file model: strict shape checks, content hash, loader errors naming the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from schemas.device_schema import SchemaFile, SchemaFileError, load_schema_file, parse_schema_text
from tests.unit.conftest import ISSUE_EXAMPLE, schema_with


def test_issue_example_loads_with_defaults(issue_schema: SchemaFile) -> None:
    assert issue_schema.name == "weather-station"
    assert issue_schema.tenant == "acme"
    state = issue_schema.topic("state")
    temp_c, battery_v, door_open, temp_f, _ = state.parameters
    assert (temp_c.source, temp_c.required, temp_c.critical) == ("temp", True, True)
    assert (temp_c.min, temp_c.max) == (-60.0, 80.0)
    assert battery_v.mutate == "value / 1000" and not battery_v.required
    assert door_open.type == "boolean"
    assert temp_f.is_derived and temp_f.source is None


def test_hash_ignores_formatting_key_order_and_spelled_out_defaults() -> None:
    block = """\
schema: s
tenant: acme
topics:
- name: t
  parameters:
  - name: a
    type: number
    min: 0
  - {name: b, type: number, derived: "a * 2"}
"""
    flow = """\
# the same content, differently written
tenant: acme
schema: s
topics: [{parameters: [{type: number, name: a, source: a, required: false, min: 0.0},
                       {derived: "a * 2", name: b, type: number}], name: t}]
"""
    first = parse_schema_text(block)
    second = parse_schema_text(flow)
    assert first.content_hash() == second.content_hash()
    assert len(first.content_hash()) == 64


def test_hash_changes_with_content() -> None:
    base = parse_schema_text(ISSUE_EXAMPLE)
    changed = parse_schema_text(ISSUE_EXAMPLE.replace("value / 1000", "value / 100"))
    assert base.content_hash() != changed.content_hash()


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ("      - {name: a, type: num}\n", "parameters[0] (a).type"),
        ("      - {name: a, type: number, required: 'yes'}\n",
         "required: Input should be a valid boolean"),
        ("      - {name: a, type: number, min: '1'}\n", "parameters[0] (a).min"),
        ("      - {name: a, type: string, min: 1}\n", "min/max apply to number and integer"),
        ("      - {name: a, type: number, min: 5, max: 1}\n",
         "min (5.0) is greater than max (1.0)"),
        ("      - {name: a, type: number, derived: '1', source: x}\n", "cannot have source"),
        ("      - {name: a, type: number, derived: '1', mutate: 'value'}\n", "cannot have mutate"),
        ("      - {name: a, type: number, derived: '1', required: true}\n", "cannot have required"),
        ("      - {name: a, type: number}\n      - {name: a, type: number}\n",
         "duplicate parameter name(s): a"),
        ("      - {name: 2fast, type: number}\n", "String should match pattern"),
        ("      - {name: a__b, type: number}\n", "cannot contain '__'"),
        ("      - {name: lambda, type: number}\n", "'lambda' is a reserved word"),
        ("      - {name: a, type: number, colour: red}\n",
         "colour: Extra inputs are not permitted"),
        ("      - {name: a, type: number, mutate: 5}\n", "mutate: Input should be a valid string"),
        ("      - {name: a, type: number, source: 'x..y'}\n", "source: String should match"),
    ],
)
def test_invalid_parameters_are_reported_with_location(parameters: str, fragment: str) -> None:
    with pytest.raises(SchemaFileError) as caught:
        parse_schema_text(schema_with(parameters), filename="station.yaml")
    assert caught.value.code == "SCHEMA_FILE_INVALID"
    assert "station.yaml" in str(caught.value)
    assert any(fragment in problem for problem in caught.value.problems), caught.value.problems


def test_top_level_problems() -> None:
    with pytest.raises(SchemaFileError) as caught:
        parse_schema_text("schema: Bad Name\ntenant: acme\ntopics: []\n", filename="f.yaml")
    problems = caught.value.problems
    assert any(p.startswith("schema:") for p in problems)
    assert any(p.startswith("topics:") and "at least 1" in p for p in problems)


def test_duplicate_topics_are_refused() -> None:
    text = ("schema: s\ntenant: acme\ntopics:\n"
            "  - {name: t, parameters: [{name: a, type: number}]}\n"
            "  - {name: t, parameters: [{name: b, type: number}]}\n")
    with pytest.raises(SchemaFileError, match="duplicate topic name"):
        parse_schema_text(text)


def test_yaml_aliases_and_duplicate_keys_are_refused() -> None:
    with pytest.raises(SchemaFileError) as alias:
        parse_schema_text("a: &x [1, 2]\nb: *x\n", filename="f.yaml")
    assert alias.value.code == "SCHEMA_FILE_YAML" and "aliases" in str(alias.value)
    with pytest.raises(SchemaFileError) as duplicate:
        parse_schema_text("schema: a\nschema: b\n", filename="f.yaml")
    assert "duplicate key 'schema'" in str(duplicate.value)


def test_loader_names_the_file(write_schema: Callable[[str], Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SchemaFileError) as unreadable:
        load_schema_file(missing)
    assert unreadable.value.code == "SCHEMA_FILE_UNREADABLE"
    assert str(missing) in str(unreadable.value)
    broken = write_schema("schema: [unclosed\n", name="broken.yaml")
    with pytest.raises(SchemaFileError) as syntax:
        load_schema_file(broken)
    assert syntax.value.code == "SCHEMA_FILE_YAML"
    assert str(broken) in str(syntax.value)
    not_mapping = write_schema("- 1\n", name="list.yaml")
    with pytest.raises(SchemaFileError, match="must be a mapping"):
        load_schema_file(not_mapping)
