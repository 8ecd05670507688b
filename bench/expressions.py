"""How fast are schema expressions? Tideway's compiled expressions against simpleeval.

Runs on one core, in one process, over a 10-parameter schema in the style of issue 2 (five
measured parameters, four of them mutated, and five derived parameters in chains:
temp_c → temp_f → heat_index → feels_like_c). Rows:

* ``tideway compiled`` — each compiled expression called directly (the per-parameter cost);
* ``tideway mutate+derive`` — the two stages as the pipeline calls them, per envelope;
* ``tideway validate+mutate+derive`` — the full pure per-envelope work, including extraction;
* ``simpleeval pre-parsed`` / ``simpleeval`` — the same expressions under simpleeval, with the
  parse done once, and as it is usually called (parsing each time).

Prints a table and writes ``bench/results/expressions.json``. Usage::

    .venv/bin/python bench/expressions.py [--envelopes 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import simpleeval

from schemas.device_schema import parse_schema_text
from stages.ingest.derive import derive
from stages.ingest.mutate import mutate
from stages.ingest.program import compile_schema
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import validate

TARGET = 1_000_000
RESULTS = Path(__file__).resolve().parent / "results" / "expressions.json"

SCHEMA = """\
schema: bench-station
tenant: acme
topics:
  - name: state
    parameters:
      - {name: temp_c, source: temp, type: number, required: true, critical: true, min: -60, max: 80}
      - {name: humidity, source: rh, type: number, min: 0, max: 100, mutate: "clamp(value, 0, 100)"}
      - {name: battery_v, source: bat_mv, type: number, mutate: "value / 1000"}
      - {name: pressure_hpa, source: baro.pa, type: number, mutate: "round(value / 100, 1)"}
      - {name: wind_ms, source: wind.mph, type: number, mutate: "value * 0.44704"}
      - {name: temp_f, type: number, derived: "temp_c * 9 / 5 + 32"}
      - {name: heat_index, type: number, derived: "temp_f if temp_f < 80 else temp_f + 0.1 * (temp_f - 80)"}
      - {name: dew_point_c, type: number, derived: "temp_c - (100 - humidity) / 5"}
      - {name: battery_low, type: boolean, derived: "battery_v < 3.3 or pressure_hpa < 950"}
      - {name: feels_like_c, type: number, derived: "(heat_index - 32) * 5 / 9 - 0.7 * max(wind_ms - 1.5, 0)"}
"""  # noqa: E501 - one parameter per line reads like the operator's file

PAYLOAD = {"temp": 29.5, "rh": 71.0, "bat_mv": 3912, "baro": {"pa": 101325}, "wind": {"mph": 9}}

SIMPLEEVAL_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "clamp": lambda x, lo, hi: max(min(x, hi), lo), "round": round, "max": max, "min": min,
    "sqrt": math.sqrt, "abs": abs,
}


def _best_rate(work: Callable[[int], int], count: int, repeat: int) -> float:
    """Best of ``repeat`` runs of ``work(count)``, as units of work per second."""
    best = 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        units = work(count)
        best = max(best, units / (time.perf_counter() - started))
    return best


def _expressions(program: TopicProgram) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(parameter, expression text, compiled function) for every mutate and derived."""
    found = []
    for spec in program.parameters:
        compiled = spec.mutate or spec.derived
        if compiled is not None:
            found.append((spec.name, compiled.source, compiled.function))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envelopes", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    program = compile_schema(parse_schema_text(SCHEMA), filename="bench")["state"]
    extracted = validate(program, PAYLOAD).extracted
    mutated = mutate(program, extracted).values
    final = derive(program, mutated).final
    expressions = _expressions(program)
    per_envelope = len(expressions)
    # Each expression reads the mapping the pipeline gives it: mutations the extracted values,
    # derived parameters the final ones.
    inputs = [extracted if program.parameter(name).mutate else final
              for name, _, _ in expressions]
    calls = [(function, values)
             for (_, _, function), values in zip(expressions, inputs, strict=True)]

    def compiled(count: int) -> int:
        for _ in range(count):
            for function, values in calls:
                function(values)
        return count * per_envelope

    def stages(count: int) -> int:
        for _ in range(count):
            derive(program, mutate(program, extracted).values)
        return count * per_envelope

    def pipeline(count: int) -> int:
        for _ in range(count):
            checked = validate(program, PAYLOAD)
            derive(program, mutate(program, checked.extracted).values)
        return count

    evaluator = simpleeval.SimpleEval(functions=SIMPLEEVAL_FUNCTIONS)
    simple = []
    for (name, text, function), values in zip(expressions, inputs, strict=True):
        names = {**values, "value": values.get(name)}
        simple.append((text, evaluator.parse(text), names))
        evaluator.names = names
        assert math.isclose(float(evaluator.eval(text)), float(function(values))), name

    def simpleeval_parsed(count: int) -> int:
        for _ in range(count):
            for text, parsed, names in simple:
                evaluator.names = names
                evaluator.eval(text, previously_parsed=parsed)
        return count * per_envelope

    def simpleeval_text(count: int) -> int:
        for _ in range(count):
            for text, _, names in simple:
                evaluator.names = names
                evaluator.eval(text)
        return count * per_envelope

    n, repeat = args.envelopes, args.repeat
    evals, envelopes = "evaluations/s", "envelopes/s"
    rows = [
        ("tideway compiled", evals, _best_rate(compiled, n, repeat)),
        ("tideway mutate+derive", evals, _best_rate(stages, n, repeat)),
        ("simpleeval pre-parsed", evals, _best_rate(simpleeval_parsed, n // 10, repeat)),
        ("simpleeval", evals, _best_rate(simpleeval_text, n // 50, repeat)),
        ("tideway validate+mutate+derive", envelopes, _best_rate(pipeline, n // 2, repeat)),
    ]
    print(f"{per_envelope} expressions per envelope, 10 parameters; best of {repeat}, one core")
    print(f"{'row':34} {'rate':>14}  unit             ns each")
    for label, unit, rate in rows:
        print(f"{label:34} {rate:>14,.0f}  {unit:16} {1e9 / rate:>8,.0f}")
    headline = rows[0][2]
    print(f"target {TARGET:,} evaluations/s: {'met' if headline >= TARGET else 'NOT met'} "
          f"({headline / rows[3][2]:.0f}x simpleeval, {headline / rows[2][2]:.1f}x pre-parsed)")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "expressions",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "platform": platform.platform(),
        "simpleeval": importlib.metadata.version("simpleeval"),
        "expressions_per_envelope": per_envelope,
        "parameters": len(program.parameters),
        "envelopes": n,
        "repeat": args.repeat,
        "target_evaluations_per_second": TARGET,
        "target_met": headline >= TARGET,
        "rows": [{"name": label, "unit": unit, "rate": round(rate), "ns_each": round(1e9 / rate)}
                 for label, unit, rate in rows],
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
