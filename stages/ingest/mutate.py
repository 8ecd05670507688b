"""The ``mutate`` stage: apply each measured parameter's ``mutate`` expression.

Every mutation reads the *extracted* values (its own as ``value``, the others by name), never
another mutation's output, so the order of mutations cannot change the result. A mutation over
a missing value yields a missing value unless it supplies one (``coalesce(value, 0)``). The
``change_set`` records ``(before, after)`` for each parameter a mutation actually changed. The
first failing evaluation stops the stage and is reported as ``error``; the stage never raises.

``evaluate``'s fast path runs the topic's specialised form instead when validate found nothing
(:class:`~stages.ingest.topic_program.FastPath`): the same mutations over the same values, written
into the extracted dict in place, without the copy or the result object. This function is the
reference it must agree with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.expr.errors import translate_eval_error
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import Issue


@dataclass(frozen=True, kw_only=True, slots=True)
class MutationResult:
    """Values after mutation (every measured parameter), what changed, and any failure."""

    values: dict[str, Any]
    change_set: dict[str, tuple[Any, Any]]
    error: Issue | None


def mutate(program: TopicProgram, extracted: dict[str, Any]) -> MutationResult:
    """Apply ``program``'s mutations to the output of ``validate`` (``extracted``)."""
    values = dict(extracted)
    change_set: dict[str, tuple[Any, Any]] = {}
    name = ""
    try:
        for name, function in program.mutations:
            after = function(extracted)
            before = extracted[name]
            if after != before:
                values[name] = after
                change_set[name] = (before, after)
    except Exception as exc:  # an evaluation failed: report it with its stable code
        failure = translate_eval_error(exc)
        return MutationResult(
            values=values, change_set=change_set,
            error=Issue(parameter=name, code=failure.code, critical=True,
                        message=f"mutate '{name}': {failure.message}"),
        )
    return MutationResult(values=values, change_set=change_set, error=None)
