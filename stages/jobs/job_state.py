"""The job state machine of spec 000 §7.1 as one table.

Theory of operation
-------------------
A job is ``created`` while its dependencies run, ``queued`` once they are done, ``running``
while a worker holds it, and ends ``succeeded``, ``failed``, ``skipped`` (gating, or a hard
dependency did not succeed) or ``cancelled``. A retriable failure parks it in ``retry_wait``
until ``next_run_at``; cancelling a running job only *requests* it (``cancel_requested``) and
the worker acknowledges at its next checkpoint.

Two additions to the spec's list, both needed by its own §10: a job waiting in ``retry_wait``
can be cancelled, and a ``created`` job is cancelled directly ("if job is queued or created,
mark as cancelled"). Migration ``0003_jobs`` installs the same pairs as a trigger, so Postgres
refuses an illegal UPDATE too; ``tests/unit/stages/jobs`` and ``tests/integration/jobs`` walk
every pair.
The checks are the generic ones of :class:`stages.transitions.Transitions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from schemas import error_codes as codes
from stages.transitions import Transitions


class JobState(StrEnum):
    """Every state a job can be in (the values are stored in ``jobs.state``)."""

    CREATED = "created"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY_WAIT = "retry_wait"
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


S = JobState

TRANSITIONS: Final[Mapping[JobState, frozenset[JobState]]] = {
    S.CREATED: frozenset({S.QUEUED, S.SKIPPED, S.CANCELLED}),
    S.QUEUED: frozenset({S.RUNNING, S.SKIPPED, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.RETRY_WAIT, S.FAILED, S.CANCEL_REQUESTED}),
    S.RETRY_WAIT: frozenset({S.QUEUED, S.CANCELLED}),
    S.CANCEL_REQUESTED: frozenset({S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.SKIPPED: frozenset(),
}

TERMINAL: Final = frozenset(s for s, targets in TRANSITIONS.items() if not targets)
"""States a job never leaves: succeeded, failed, cancelled, skipped."""

ACTIVE: Final = frozenset({S.RUNNING, S.CANCEL_REQUESTED})
"""States in which a worker holds the job (locked_by is set, heartbeats flow)."""

NOT_STARTED: Final = frozenset({S.CREATED, S.QUEUED, S.RETRY_WAIT})
"""States a cancellation turns directly into ``cancelled``."""


JOB_MACHINE: Final = Transitions(table=TRANSITIONS, name="job", code=codes.ILLEGAL_JOB_TRANSITION)
"""The machine; illegal moves raise ``ILLEGAL_JOB_TRANSITION``."""

can_transition = JOB_MACHINE.can
check_transition = JOB_MACHINE.check
sql_pairs = JOB_MACHINE.sql_pairs
