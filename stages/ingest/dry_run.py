"""One sample payload through validate -> mutate -> derive, as plain data (``schema test``).

Pure: no service is touched, so an operator can try a schema (a file with ``tideway schema
test``, a stored version with ``POST /v1/schemas/{name}/test``) before any device sends.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from stages.ingest.derive import derive
from stages.ingest.mutate import mutate
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import Issue, validate

__all__ = ["evaluate_payload", "sample_values"]


def sample_values(data: Any) -> Any:
    """The ``values`` of an envelope, or the whole sample if it is not an envelope."""
    if isinstance(data, dict) and isinstance(data.get("values"), dict) and "ts" in data:
        return data["values"]
    return data


def evaluate_payload(program: TopicProgram, values: Any) -> dict[str, Any]:
    """What the three pure stages produce for ``values``, as plain data.

    ``outcome`` follows the pipeline: ``failed_validation`` stops before mutate,
    ``failed_mutate``/``failed_derive`` name the stage whose evaluation failed.
    """
    checked = validate(program, values)
    report: dict[str, Any] = {
        "schema": program.schema,
        "topic": program.topic,
        "content_hash": program.content_hash,
        "validate": {
            "ok": checked.ok,
            "extracted": checked.extracted,
            "issues": [_issue(i) for i in checked.issues],
        },
        "mutate": None,
        "derive": None,
        "outcome": "failed_validation",
    }
    if not checked.ok:
        return report
    mutated = mutate(program, checked.extracted)
    report["mutate"] = {
        "values": mutated.values,
        "change_set": mutated.change_set,
        "error": _issue(mutated.error),
    }
    if mutated.error is not None:
        report["outcome"] = "failed_mutate"
        return report
    derived = derive(program, mutated.values)
    report["derive"] = {
        "derived": derived.derived,
        "final": derived.final,
        "error": _issue(derived.error),
    }
    report["outcome"] = "failed_derive" if derived.error is not None else "processed"
    return report


def _issue(issue: Issue | None) -> dict[str, Any] | None:
    return None if issue is None else asdict(issue)
