"""Retry decisions and backoff delays."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.jobs.retry import RetryPolicy, decide, schedule_delay

SCHEDULE = (30.0, 120.0, 600.0)


def test_retriable_with_attempts_left_retries_on_schedule() -> None:
    d = decide(
        code="TRANSIENT",
        retriable=True,
        attempt=1,
        max_attempts=3,
        non_retriable=frozenset(),
        schedule=SCHEDULE,
        u=0.0,
    )
    assert d.retry and d.delay_s == 30.0 and d.why == "retriable"
    d = decide(
        code="TRANSIENT",
        retriable=True,
        attempt=2,
        max_attempts=3,
        non_retriable=frozenset(),
        schedule=SCHEDULE,
        u=0.5,
    )
    assert d.retry and d.delay_s == pytest.approx(120.0 * 0.9)


def test_exhausted_or_non_retriable_fail() -> None:
    d = decide(
        code="TRANSIENT",
        retriable=True,
        attempt=3,
        max_attempts=3,
        non_retriable=frozenset(),
        schedule=SCHEDULE,
        u=0.1,
    )
    assert not d.retry and d.why == "attempts_exhausted"
    d = decide(
        code="UNSUPPORTED_FORMAT",
        retriable=True,
        attempt=1,
        max_attempts=3,
        non_retriable=frozenset({"UNSUPPORTED_FORMAT"}),
        schedule=SCHEDULE,
        u=0.1,
    )
    assert not d.retry and d.why == "non_retriable"
    d = decide(
        code="X",
        retriable=False,
        attempt=1,
        max_attempts=3,
        non_retriable=frozenset(),
        schedule=SCHEDULE,
        u=0.1,
    )
    assert not d.retry


def test_last_schedule_entry_repeats_and_bad_draws_are_refused() -> None:
    assert schedule_delay(SCHEDULE, 7, 0.0) == 600.0
    assert schedule_delay((), 1, 0.3) == 0.0
    with pytest.raises(ValueError):
        schedule_delay(SCHEDULE, 1, 1.0)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


@given(attempt=st.integers(1, 20), u=st.floats(0, 1, exclude_max=True))
def test_schedule_delay_stays_within_the_spread(attempt: int, u: float) -> None:
    base = SCHEDULE[min(attempt, 3) - 1]
    assert base * 0.8 <= schedule_delay(SCHEDULE, attempt, u) <= base

