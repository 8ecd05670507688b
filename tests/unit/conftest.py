"""Shared helpers of the unit tests: device schema files built from text in a temporary folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from schemas.device_schema import SchemaFile, load_schema_file

ISSUE_EXAMPLE = """\
schema: weather-station
tenant: acme
topics:
  - name: state
    parameters:
      - {name: temp_c, source: temp, type: number, unit: degC, required: true, critical: true, min: -60, max: 80}
      - {name: battery_v, source: bat_mv, type: number, unit: V, mutate: "value / 1000"}
      - {name: door_open, source: door, type: boolean}
      - {name: temp_f, type: number, unit: degF, derived: "temp_c * 9 / 5 + 32"}
      - {name: heat_index, type: number, derived: "temp_f if temp_f < 80 else temp_f + 0.1 * (temp_f - 80)"}
"""  # noqa: E501 - verbatim from issue 2


@pytest.fixture
def write_schema(tmp_path: Path) -> Callable[[str], Path]:
    """Write ``text`` to ``<tmp>/schema.yaml`` and return the path."""

    def write(text: str, name: str = "schema.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def issue_schema(write_schema: Callable[[str], Path]) -> SchemaFile:
    """The example schema from issue 2, loaded from a file."""
    return load_schema_file(write_schema(ISSUE_EXAMPLE))


def schema_with(parameters: str, *, topic: str = "state") -> str:
    """A one-topic schema file whose parameters block is ``parameters`` (YAML list items)."""
    return f"schema: s\ntenant: acme\ntopics:\n  - name: {topic}\n    parameters:\n{parameters}"
