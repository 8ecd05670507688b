"""The ``derive`` stage: compute derived parameters from the final measured values.

Derived parameters run in dependency order (fixed when the schema was compiled), each seeing
the mutated measured values and the derived values computed before it. A derived parameter
whose needed inputs are missing is itself missing (``None``). The first failing evaluation stops
the stage and is reported as ``error``, with the values computed up to that point; the stage
never raises.

``evaluate``'s fast path runs the topic's specialised form instead for a clean envelope
(:class:`~stages.ingest.topic_program.FastPath`): the same derivations in the same order, added to
the mutated dict in place, without the copy or the result object. This function is the
reference it must agree with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.expr.errors import translate_eval_error
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import Issue


@dataclass(frozen=True, kw_only=True, slots=True)
class DeriveResult:
    """``derived`` holds the derived parameters; ``final`` holds every parameter."""

    derived: dict[str, Any]
    final: dict[str, Any]
    error: Issue | None


def derive(program: TopicProgram, mutated: dict[str, Any]) -> DeriveResult:
    """Evaluate ``program``'s derived parameters over ``mutated`` (from :func:`mutate`)."""
    final = dict(mutated)
    derived: dict[str, Any] = {}
    name = ""
    try:
        for name, function in program.derivations:
            derived[name] = final[name] = function(final)
    except Exception as exc:  # an evaluation failed: report it with its stable code
        failure = translate_eval_error(exc)
        return DeriveResult(
            derived=derived, final=final,
            error=Issue(parameter=name, code=failure.code, critical=True,
                        message=f"derive '{name}': {failure.message}"),
        )
    return DeriveResult(derived=derived, final=final, error=None)
