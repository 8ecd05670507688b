"""The device charts' bucket width: a round step, at most 240 buckets over the readings' span."""

from __future__ import annotations

import datetime as dt

import pytest

from streams.views.parameter_series import MAX_POINTS, STEPS, bucket_step

S = dt.timedelta(seconds=1)


@pytest.mark.parametrize(
    ("span_s", "step_s"),
    [(0, 1), (120, 1), (239, 1), (240, 2), (1200, 10), (3600, 30), (86_400, 600), (10**7, 21_600)],
)
def test_the_step_is_the_smallest_round_one_that_fits(span_s: int, step_s: int) -> None:
    assert bucket_step(span_s * S) == step_s * S


def test_the_buckets_from_any_start_to_now_are_at_most_max_points() -> None:
    # Buckets start on multiples of the step (ClickHouse's toStartOfInterval), so the span's
    # first bucket may begin up to a step before its first reading.
    for span_s in range(1, 90_000, 7):
        step = bucket_step(span_s * S) // S
        for first in (0, 1, step - 1):
            now = first + span_s
            assert now // step - first // step + 1 <= MAX_POINTS, (span_s, step, first)
    assert all(86_400 % (s // S) == 0 for s in STEPS), "every step divides a day"
