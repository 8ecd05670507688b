"""The telemetry processing-state machine of spec 001, as one table.

Theory of operation. A ``device_telemetry_logs`` row is written by the persist stage in one of
the initial states below and records what became of the envelope's values::

    [*] -> processed         all checks passed (and, unless it moves on, publish succeeded)
    [*] -> invalid           a required/critical check (or an expression) failed
    [*] -> inactive_skipped  the device is inactive: kept for audit, no side effects
    processed -> publish_failed   the hot-state / analytics side effects failed for good
    publish_failed -> processed   an operator's redrive published them after all

Like the ingestion status, a batch inserts each row with the state it ended in, so
``processed -> publish_failed`` happens inside the inserting transaction
(:func:`recorded_path`); ``publish_failed -> processed`` is an ``UPDATE`` made by
``tideway dlq redrive``. The SQL trigger from migration ``0002_ingest`` guards the same moves;
the checks are the generic ones of :class:`stages.transitions.Transitions`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from schemas import error_codes as codes
from stages.transitions import Transitions


class ProcessingState(StrEnum):
    """A telemetry processing state (``device_telemetry_logs.processing_state``)."""

    PROCESSED = "processed"
    INVALID = "invalid"
    INACTIVE_SKIPPED = "inactive_skipped"
    PUBLISH_FAILED = "publish_failed"


INITIAL = frozenset(
    {ProcessingState.PROCESSED, ProcessingState.INVALID, ProcessingState.INACTIVE_SKIPPED}
)
"""States the persist stage can create a row in."""

TRANSITIONS: dict[ProcessingState, frozenset[ProcessingState]] = {
    ProcessingState.PROCESSED: frozenset({ProcessingState.PUBLISH_FAILED}),
    ProcessingState.INVALID: frozenset(),
    ProcessingState.INACTIVE_SKIPPED: frozenset(),
    ProcessingState.PUBLISH_FAILED: frozenset({ProcessingState.PROCESSED}),
}
"""Allowed moves: ``TRANSITIONS[a]`` is every state ``a`` may change to."""

PROCESSING_MACHINE: Final = Transitions(
    table=TRANSITIONS,
    name="processing state",
    code=codes.ILLEGAL_PROCESSING_STATE_TRANSITION,
    initial=INITIAL,
)
"""The machine; illegal moves raise ``ILLEGAL_PROCESSING_STATE_TRANSITION``."""

can_transition = PROCESSING_MACHINE.can
check_transition = PROCESSING_MACHINE.check
check_path = PROCESSING_MACHINE.check_path


def recorded_path(final: ProcessingState) -> tuple[ProcessingState, ...]:
    """The states one insert of a row in state ``final`` passes through."""
    if final is ProcessingState.PUBLISH_FAILED:
        return (ProcessingState.PROCESSED, ProcessingState.PUBLISH_FAILED)
    return (final,)
