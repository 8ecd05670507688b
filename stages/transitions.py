"""One small, generic state-machine helper (h11's ``_state.py`` is the model).

Each of Tideway's state machines - the ingestion status and the telemetry processing state
(``stages/ingest/status.py``, ``processing_state.py``), the job and the run state
(``stages/jobs/job_state.py``, ``run_state.py``) - is one table in one file: a mapping from a
state to the states it may move to. The table is data; :class:`Transitions` wraps it with the
checks every machine needs, written once:

- :meth:`Transitions.can` answers whether one step is legal;
- :meth:`Transitions.check` raises :class:`IllegalTransition` (with the machine's own stable
  code, e.g. ``ILLEGAL_JOB_TRANSITION``) unless it is;
- :meth:`Transitions.check_path` checks a whole path from an initial state;
- :meth:`Transitions.sql_pairs` gives the table as ``"from>to"`` strings, the form the
  Postgres triggers of the migrations check, so a test can compare the two.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from stages.errors import StageError

__all__ = ["IllegalTransition", "Transitions"]

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(StageError):
    """A state change that a machine's table does not allow.

    ``code`` names the machine (``ILLEGAL_STATUS_TRANSITION``, ``ILLEGAL_JOB_TRANSITION``...);
    ``ILLEGAL_TRANSITION`` is Postgres's trigger refusing the same move.
    """

    code = "ILLEGAL_TRANSITION"


@dataclass(frozen=True, kw_only=True)
class Transitions(Generic[S]):
    """A state machine: ``table[a]`` is every state ``a`` may change to.

    ``name`` words the machine in messages (``"job"``: "job cannot go from queued to
    succeeded"); ``code`` is the stable code of its :class:`IllegalTransition`; ``initial``
    lists the states a row may be created in (only :meth:`check_path` reads it).
    """

    table: Mapping[S, frozenset[S]]
    name: str
    code: str
    initial: frozenset[S] = frozenset()

    def can(self, current: S, new: S) -> bool:
        """Whether ``current -> new`` is one legal step."""
        return new in self.table[current]

    def check(self, current: S, new: S) -> S:
        """Return ``new`` if ``current -> new`` is legal, else raise :class:`IllegalTransition`."""
        if not self.can(current, new):
            raise self.illegal(f"{self.name} cannot go from {current} to {new}")
        return new

    def check_path(self, path: Sequence[S]) -> None:
        """Raise unless ``path`` starts in an initial state and every step is legal."""
        if not path or path[0] not in self.initial:
            starts = ", ".join(sorted(self.initial))
            raise self.illegal(f"a {self.name} path must start in {starts}")
        for current, new in itertools.pairwise(path):
            self.check(current, new)

    def sql_pairs(self) -> frozenset[str]:
        """The table as ``"from>to"`` strings, the form the database triggers check."""
        return frozenset(f"{a}>{b}" for a, targets in self.table.items() for b in targets)

    def illegal(self, message: str) -> IllegalTransition:
        """The error this machine raises for ``message`` (for checks a table cannot express)."""
        return IllegalTransition(message, code=self.code)
