"""Property tests: any JSON an envelope can carry goes through the stages without raising."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.device_schema import parse_schema_text
from stages.ingest.derive import derive
from stages.ingest.mutate import mutate
from stages.ingest.program import compile_schema
from stages.ingest.validate import validate

SCHEMA = """\
schema: s
tenant: acme
topics:
  - name: t
    parameters:
      - {name: temp_c, source: temp, type: number, required: true, min: -60, max: 80}
      - {name: count, source: a.b, type: integer, critical: true, min: 0}
      - {name: flag, type: boolean}
      - {name: label, type: string, mutate: "upper(value) + '!'"}
      - {name: ratio, type: number, mutate: "value / coalesce(temp_c, 1)"}
      - {name: temp_f, type: number, derived: "temp_c * 9 / 5 + 32"}
      - {name: big, type: integer, derived: "count * count * count"}
      - {name: text, type: string, derived: "label + string(flag) if flag else label"}
"""
PROGRAM = compile_schema(parse_schema_text(SCHEMA))["t"]
TYPES = {"temp_c": float, "count": int, "flag": bool, "label": str, "ratio": float}



def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Named, not a lambda: hypothesis must see that ``extend`` uses its argument.
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    _containers,
    max_leaves=10,
)
payloads = st.fixed_dictionaries(
    {},
    optional={"temp": json_values, "a": json_values | st.fixed_dictionaries({"b": json_values}),
              "flag": json_values, "label": json_values, "ratio": json_values},
)


@settings(max_examples=300, deadline=2000)
@given(values=payloads | json_values)
def test_stages_report_instead_of_raising(values: Any) -> None:
    checked = validate(PROGRAM, values)
    assert set(checked.extracted) == set(TYPES)
    for name, value in checked.extracted.items():
        assert value is None or type(value) is TYPES[name]
        if isinstance(value, float):
            assert math.isfinite(value)
    assert checked.ok == (not any(i.critical for i in checked.issues))
    if not checked.ok:
        return
    mutated = mutate(PROGRAM, checked.extracted)
    assert mutated.error is None or mutated.error.code.startswith("EVAL_")
    result = derive(PROGRAM, mutated.values)
    assert result.error is None or result.error.code.startswith("EVAL_")
    if result.error is None:
        assert set(result.final) == set(TYPES) | {"temp_f", "big", "text"}
