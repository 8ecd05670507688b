"""One sample payload through ingress -> validate -> mutate -> derive, as plain data
(``schema test``).

Pure: no service is touched, so an operator can try a schema (a file with ``tideway schema
test``, a stored version with ``POST /v1/schemas/{name}/test``) before any device sends.

A sample is either a whole envelope (an object with ``ts`` and ``values``) or only its
values. An envelope is held to the same contract ingest holds a body to
(:func:`stages.ingest.ingress.check_envelope`): one that ingest would dead-letter as
``ENVELOPE_INVALID`` (a ``ts`` that is no time, a negative ``seq``...) is ``failed_ingress``
here, never ``processed``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from stages.ingest.derive import derive
from stages.ingest.ingress import EnvelopeError, check_envelope
from stages.ingest.mutate import mutate
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import Issue, validate

__all__ = ["evaluate_payload", "evaluate_sample", "is_envelope"]


def is_envelope(data: Any) -> bool:
    """Whether a sample is a whole envelope (an object with ``ts`` and ``values``) rather
    than only an envelope's values."""
    return isinstance(data, dict) and "ts" in data and "values" in data


def evaluate_sample(program: TopicProgram, sample: Any) -> dict[str, Any]:
    """What ingress and the three pure stages make of ``sample``, as plain data.

    An envelope is checked as ingest checks one first (the report's ``ingress``; ``None``
    for a sample of values only); one that breaks the contract stops there, with outcome
    ``failed_ingress`` and the code ingest would dead-letter it with.
    """
    if not is_envelope(sample):
        return {**_head(program), "ingress": None, **_stages(program, sample)}
    try:
        envelope = check_envelope(sample)
    except EnvelopeError as exc:
        return {**_head(program),
                "ingress": {"ok": False, "code": exc.code, "message": exc.message},
                "validate": None, "mutate": None, "derive": None, "outcome": "failed_ingress"}
    return {**_head(program), "ingress": {"ok": True, "code": None, "message": None},
            **_stages(program, envelope.values)}


def evaluate_payload(program: TopicProgram, values: Any) -> dict[str, Any]:
    """What the three pure stages produce for ``values`` (an envelope's values), as plain
    data; :func:`evaluate_sample` takes a whole envelope too.

    ``outcome`` follows the pipeline: ``failed_validation`` stops before mutate,
    ``failed_mutate``/``failed_derive`` name the stage whose evaluation failed.
    """
    return {**_head(program), **_stages(program, values)}


def _head(program: TopicProgram) -> dict[str, Any]:
    return {"schema": program.schema, "topic": program.topic,
            "content_hash": program.content_hash}


def _stages(program: TopicProgram, values: Any) -> dict[str, Any]:
    checked = validate(program, values)
    report: dict[str, Any] = {
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
