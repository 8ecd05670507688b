"""Retry decisions and backoff delays of batch jobs (spec 000 §9.1).

A failed attempt is retried when the error is retriable, its code is not in the job type's
``non_retriable`` set and attempts remain. The delay follows the configured schedule (30 s,
2 min, 10 min by default; the last entry repeats) shortened by up to ``spread`` so that jobs
failing together do not retry together. The random draw ``u`` in [0, 1) is an argument: the
caller owns the random source, tests pass fixed values. (The full-jitter backoff of the
JetStream consumers is :mod:`stages.backoff`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

#: Attempts of a job type whose DAG entry sets none (``TIDEWAY_RETRY__JOB_MAX_ATTEMPTS``).
DEFAULT_MAX_ATTEMPTS: Final = 3

#: Attempts a job may lose to its worker (kill -9, OOM kill, drain) before it fails with
#: ``WORKER_LOST`` (``TIDEWAY_WORKER__MAX_LOST``). Not counted against its own attempts.
DEFAULT_MAX_LOST: Final = 3


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How one job type retries.

    ``max_attempts=None`` and ``backoff_s=None`` mean the configured defaults
    (``Settings.retry.job_max_attempts`` and ``job_backoff_s``); a value set here wins.
    """

    max_attempts: int | None = None
    backoff_s: tuple[float, ...] | None = None
    non_retriable: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def attempts(self, default: int) -> int:
        """This job type's attempt limit: its own where set, else ``default``."""
        return default if self.max_attempts is None else self.max_attempts


@dataclass(frozen=True, kw_only=True)
class RetryDecision:
    """Retry after ``delay_s`` or give up; ``why`` is a short stable word for logs."""

    retry: bool
    delay_s: float
    why: str


def decide(
    *,
    code: str,
    retriable: bool,
    attempt: int,
    max_attempts: int,
    non_retriable: frozenset[str],
    schedule: Sequence[float],
    u: float,
) -> RetryDecision:
    """Whether attempt number ``attempt`` (1-based) that failed with ``code`` is retried."""
    if not retriable or code in non_retriable:
        return RetryDecision(retry=False, delay_s=0.0, why="non_retriable")
    if attempt >= max_attempts:
        return RetryDecision(retry=False, delay_s=0.0, why="attempts_exhausted")
    return RetryDecision(retry=True, delay_s=schedule_delay(schedule, attempt, u), why="retriable")


def schedule_delay(
    schedule: Sequence[float], attempt: int, u: float, *, spread: float = 0.2
) -> float:
    """Delay before retry number ``attempt`` from ``schedule``, reduced by up to ``spread``."""
    if not schedule:
        return 0.0
    _check_unit(u)
    base = schedule[min(max(attempt, 1), len(schedule)) - 1]
    return base * (1.0 - spread * u)


def _check_unit(u: float) -> None:
    if not 0.0 <= u < 1.0:
        raise ValueError(f"random draw must be in [0, 1): {u}")
