"""No stage reads the clock, the environment or a file (issue 12, item 7).

The import contracts in pyproject.toml (``lint-imports``) keep ``os``, ``time``, ``pathlib``…
out of ``stages``, but they cannot see a call: ``datetime`` is a fine import for parsing
timestamps, and ``datetime.now()`` through it is not, nor is the builtin ``open``. This test
reads every module of ``stages/`` as a syntax tree and fails on any such call, naming the file
and line. A stage that needs the time gets it as an argument.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

STAGES = Path(__file__).resolve().parents[3] / "stages"

FORBIDDEN = {
    "datetime.datetime.now": "reads the clock",
    "datetime.datetime.utcnow": "reads the clock",
    "datetime.datetime.today": "reads the clock",
    "datetime.date.today": "reads the clock",
    "time.time": "reads the clock",
    "time.time_ns": "reads the clock",
    "time.monotonic": "reads the clock",
    "time.monotonic_ns": "reads the clock",
    "time.perf_counter": "reads the clock",
    "time.perf_counter_ns": "reads the clock",
    "os.environ": "reads the environment",
    "os.environb": "reads the environment",
    "os.getenv": "reads the environment",
    "builtins.open": "opens a file",
    "io.open": "opens a file",
}
"""Fully qualified names a stage may not use, and why."""


def offences(source: str, filename: str = "<source>") -> list[str]:
    """Every use in ``source`` of a name in :data:`FORBIDDEN`, as ``file:line name (why)``.

    Names are resolved through the module's imports, so ``from datetime import datetime as dt``
    followed by ``dt.now()`` is caught as ``datetime.datetime.now``; a bare ``open`` is the
    builtin unless the module binds that name itself.
    """
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                local = name.asname or name.name.split(".")[0]
                aliases[local] = name.name if name.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for name in node.names:
                aliases[name.asname or name.name] = f"{node.module}.{name.name}"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)

    found: list[str] = []
    for node in ast.walk(tree):
        dotted = _dotted(node)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if head in aliases:
            qualified = aliases[head] + (f".{rest}" if rest else "")
        elif head == "open" and not rest and head not in bound:
            qualified = "builtins.open"
        else:
            continue
        if qualified in FORBIDDEN:
            found.append(f"{filename}:{node.lineno} {qualified} ({FORBIDDEN[qualified]})")
    return found


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name or a chain of Attributes on a Name; ``None`` for anything else.

    ``ast.walk`` visits every link of a chain (``os.environ.get``, then ``os.environ``, then
    ``os``), so a forbidden name is found whatever is done with it afterwards.
    """
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _modules() -> list[Path]:
    return sorted(STAGES.rglob("*.py"))


def test_stages_is_where_we_look() -> None:
    assert len(_modules()) > 50
    assert (STAGES / "transitions.py").exists()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(STAGES)))
def test_no_stage_reads_the_clock_the_environment_or_a_file(path: Path) -> None:
    assert offences(path.read_text(encoding="utf-8"), str(path.relative_to(STAGES.parent))) == []


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("import datetime\nx = datetime.datetime.now()", "datetime.datetime.now"),
        ("from datetime import datetime\nx = datetime.now()", "datetime.datetime.now"),
        ("from datetime import datetime as dt\nx = dt.utcnow()", "datetime.datetime.utcnow"),
        ("from datetime import date\nx = date.today()", "datetime.date.today"),
        ("import datetime as d\nx = d.date.today()", "datetime.date.today"),
        ("import time\nx = time.time()", "time.time"),
        ("import time\nx = time.monotonic()", "time.monotonic"),
        ("from time import monotonic\nx = monotonic()", "time.monotonic"),
        ("import os\nx = os.environ['HOME']", "os.environ"),
        ("import os\nx = os.environ.get('HOME')", "os.environ"),
        ("from os import environ\nx = environ['HOME']", "os.environ"),
        ("import os\nx = os.getenv('HOME')", "os.getenv"),
        ("x = open('f').read()", "builtins.open"),
        ("def f(p):\n    with open(p) as fh:\n        return fh.read()", "builtins.open"),
    ],
)
def test_the_check_catches_each_forbidden_call(source: str, name: str) -> None:
    assert any(f" {name} " in line for line in offences(source)), offences(source)


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime\nx = datetime.fromisoformat('2026-05-01T12:00:00+00:00')",
        "from datetime import UTC, datetime\nx = datetime.fromtimestamp(0, UTC)",
        "def run(now):\n    return now",
        "def f(open):\n    return open('x')",  # a parameter called open, not the builtin
        "import io\nx = io.BytesIO(b'')",
    ],
)
def test_the_check_leaves_pure_code_alone(source: str) -> None:
    assert offences(source) == []
