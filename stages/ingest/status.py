"""The ingestion status machine of spec 001, as one table.

Theory of operation. Every received envelope gets one ``ingestion_messages`` row whose
``status`` follows this machine::

    [*] -> queued -> processing -> completed | failed_validation | inactive_skipped
                                   | failed_terminal
           queued -> duplicate
    failed_terminal -> completed          (Tideway's one extension: `tideway dlq redrive`)

Tideway records a batch set-based, so a row is *inserted* once with the status its envelope
ended in: the transaction that inserts it performs ``[*] -> queued -> processing -> <final>``
(or ``[*] -> queued -> duplicate``) atomically, and no other session can observe the
intermediate states. :func:`recorded_path` names that path and :func:`check_path` checks it
against the table. After insert only the redrive edge can move a row; the SQL trigger from
migration ``0002_ingest`` refuses every other ``UPDATE`` of ``status``. The checks are the
generic ones of :class:`stages.transitions.Transitions`; illegal moves raise its
:class:`~stages.transitions.IllegalTransition` with code ``ILLEGAL_STATUS_TRANSITION``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from schemas import error_codes as codes
from stages.transitions import Transitions

__all__ = [
    "FINAL",
    "INITIAL",
    "STATUS_MACHINE",
    "TRANSITIONS",
    "Status",
    "can_transition",
    "check_path",
    "check_transition",
    "recorded_path",
]


class Status(StrEnum):
    """An ingestion status (the values stored in ``ingestion_messages.status``)."""

    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED_VALIDATION = "failed_validation"
    INACTIVE_SKIPPED = "inactive_skipped"
    FAILED_TERMINAL = "failed_terminal"
    DUPLICATE = "duplicate"


INITIAL = Status.QUEUED
"""The status every row starts in (``[*] -> queued``)."""

TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.QUEUED: frozenset({Status.PROCESSING, Status.DUPLICATE}),
    Status.PROCESSING: frozenset(
        {
            Status.COMPLETED,
            Status.FAILED_VALIDATION,
            Status.INACTIVE_SKIPPED,
            Status.FAILED_TERMINAL,
        }
    ),
    Status.COMPLETED: frozenset(),
    Status.FAILED_VALIDATION: frozenset(),
    Status.INACTIVE_SKIPPED: frozenset(),
    # A dead-lettered publish failure that an operator redrives successfully.
    Status.FAILED_TERMINAL: frozenset({Status.COMPLETED}),
    Status.DUPLICATE: frozenset(),
}
"""Allowed moves: ``TRANSITIONS[a]`` is every status ``a`` may change to."""

FINAL = frozenset(s for s in Status if s not in (Status.QUEUED, Status.PROCESSING))
"""Statuses an envelope can end a processing pass in (what a batch inserts)."""

STATUS_MACHINE: Final = Transitions(
    table=TRANSITIONS,
    name="ingestion status",
    code=codes.ILLEGAL_STATUS_TRANSITION,
    initial=frozenset({INITIAL}),
)
"""The machine; its checks raise :class:`IllegalTransition` with ``ILLEGAL_STATUS_TRANSITION``."""

can_transition = STATUS_MACHINE.can
check_transition = STATUS_MACHINE.check
check_path = STATUS_MACHINE.check_path


def recorded_path(final: Status) -> tuple[Status, ...]:
    """The steps one insert of a row in status ``final`` stands for, starting at ``queued``."""
    if final is Status.DUPLICATE:
        return (Status.QUEUED, Status.DUPLICATE)
    if final not in FINAL:
        raise STATUS_MACHINE.illegal(f"{final} is not a status an envelope is recorded in")
    return (Status.QUEUED, Status.PROCESSING, final)
