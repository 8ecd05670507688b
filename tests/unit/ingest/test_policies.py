"""Retry backoff and acknowledgement policy (pure)."""

from __future__ import annotations

import itertools

import pytest

from stages.ingest.ack_policy import Action, Disposition, decide, publish_failure_is_final
from stages.ingest.retry_policy import Backoff

B = Backoff(base_s=0.5, cap_s=30.0)


def test_ceiling_doubles_until_the_cap() -> None:
    assert [B.ceiling(i) for i in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert B.ceiling(10_000) == 30.0  # no overflow on absurd attempts
    assert B.ceiling(-3) == 0.5


def test_full_jitter_scales_the_random_draw() -> None:
    assert B.delay(3, lambda: 0.0) == 0.0
    assert B.delay(3, lambda: 0.5) == 2.0
    assert B.delay(3, lambda: 0.999) == pytest.approx(3.996)


def test_floored_delay_never_goes_below_base() -> None:
    assert B.floored_delay(5, lambda: 0.0) == 0.5
    assert B.floored_delay(5, lambda: 0.5) == 8.0


def test_schedule_has_one_sleep_between_each_try() -> None:
    draws = itertools.cycle([1.0 - 1e-9])
    sleeps = B.schedule(4, lambda: next(draws))
    assert len(sleeps) == 3
    assert sleeps == pytest.approx((0.5, 1.0, 2.0))
    assert B.schedule(1, lambda: 0.3) == ()


def test_invalid_backoffs_are_refused() -> None:
    with pytest.raises(ValueError):
        Backoff(base_s=0, cap_s=1)
    with pytest.raises(ValueError):
        Backoff(base_s=2, cap_s=1)


def test_only_recorded_envelopes_are_acked() -> None:
    for disposition in Disposition:
        decision = decide(disposition, delivered=3, backoff=B, rand=lambda: 0.5)
        assert (decision.action is Action.ACK) is (disposition is Disposition.RECORDED)
        if decision.action is Action.NAK:
            assert decision.delay_s >= B.base_s  # never an immediate redelivery


def test_nak_delay_grows_with_deliveries() -> None:
    delays = [
        decide(Disposition.UNAVAILABLE, delivered=d, backoff=B, rand=lambda: 0.999).delay_s
        for d in range(1, 8)
    ]
    assert delays == sorted(delays) and delays[-1] <= B.cap_s
    contended = decide(Disposition.CONTENDED, delivered=9, backoff=B, rand=lambda: 0.999)
    assert contended.delay_s == B.base_s


def test_publish_budget_is_counted_in_deliveries() -> None:
    assert not publish_failure_is_final(delivered=1, max_deliver=3)
    assert not publish_failure_is_final(delivered=2, max_deliver=3)
    assert publish_failure_is_final(delivered=3, max_deliver=3)
    assert publish_failure_is_final(delivered=1, max_deliver=1)
