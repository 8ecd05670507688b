"""docs/operating.md lists every metric exactly as the registry defines it."""

from __future__ import annotations

import re

from streams.observability.logs import CONTEXT_FIELDS
from streams.observability.metrics import Metrics
from tests.shared_data import REPO_ROOT

DOC = REPO_ROOT / "docs" / "operating.md"
BEGIN, END = "<!-- metrics:begin -->", "<!-- metrics:end -->"


def metric_table() -> str:
    """The table between the markers, generated from :meth:`Metrics.catalogue`."""
    lines = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for m in Metrics(process=False).catalogue():
        labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
        lines.append(f"| `{m.name}` | {m.kind} | {labels} | {m.help} |")
    return "\n".join(lines)


def test_the_metric_table_matches_the_registry() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text
    current = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    expected = metric_table()
    assert current == expected, (
        "docs/operating.md's metric table is out of date; replace the lines between the "
        f"markers with:\n{expected}"
    )


def test_every_log_context_field_is_documented() -> None:
    text = DOC.read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", text.split("## Logs", 1)[1], re.M))
    assert documented >= CONTEXT_FIELDS, CONTEXT_FIELDS - documented
