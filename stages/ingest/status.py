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
migration ``0002_ingest`` refuses every other ``UPDATE`` of ``status``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from enum import StrEnum

from stages.errors import StageError


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

ILLEGAL_TRANSITION = "ILLEGAL_STATUS_TRANSITION"


class IllegalTransition(StageError):
    """A status change the machine does not allow."""

    code = ILLEGAL_TRANSITION


def can_transition(current: Status, new: Status) -> bool:
    """Whether ``current -> new`` is one legal step."""
    return new in TRANSITIONS[current]


def check_transition(current: Status, new: Status) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> new`` is one legal step."""
    if not can_transition(current, new):
        raise IllegalTransition(f"ingestion status cannot go from {current} to {new}")


def recorded_path(final: Status) -> tuple[Status, ...]:
    """The steps one insert of a row in status ``final`` stands for, starting at ``queued``."""
    if final is Status.DUPLICATE:
        return (Status.QUEUED, Status.DUPLICATE)
    if final not in FINAL:
        raise IllegalTransition(f"{final} is not a status an envelope is recorded in")
    return (Status.QUEUED, Status.PROCESSING, final)


def check_path(path: Sequence[Status]) -> None:
    """Raise unless ``path`` starts at :data:`INITIAL` and every step is legal."""
    if not path or path[0] is not INITIAL:
        raise IllegalTransition(f"a status path must start at {INITIAL}")
    for current, new in itertools.pairwise(path):
        check_transition(current, new)
