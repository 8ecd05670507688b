"""Retry backoff and the acknowledgement table of both JetStream consumers (pure)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.ack_policy import (
    ACK,
    DEAD_LETTER,
    AckDecision,
    Action,
    Disposition,
    budget_spent,
    decide,
)
from stages.backoff import Backoff

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
    assert not budget_spent(delivered=1, max_deliver=3)
    assert not budget_spent(delivered=2, max_deliver=3)
    assert budget_spent(delivered=3, max_deliver=3)
    assert budget_spent(delivered=1, max_deliver=1)


@given(attempt=st.integers(0, 30), u=st.floats(0, 1, exclude_max=True))
def test_full_jitter_bounds(attempt: int, u: float) -> None:
    delay = Backoff(base_s=0.5, cap_s=30.0).delay(attempt, lambda: u)
    assert 0.0 <= delay < min(30.0, 0.5 * 2**attempt) or delay == 0.0


# The whole table, walked: every disposition on a first and on a late delivery, the draw
# pinned. A disposition added without a row here fails the completeness check below.
TABLE: dict[Disposition, tuple[AckDecision, AckDecision]] = {
    Disposition.RECORDED: (ACK, ACK),
    Disposition.NEVER_SUCCEEDS: (DEAD_LETTER, DEAD_LETTER),
    Disposition.RETRY: (AckDecision(action=Action.NAK, delay_s=0.5),  # floor: 0.5 * 0.5 < base
                        AckDecision(action=Action.NAK, delay_s=15.0)),  # cap 30 * 0.5
    Disposition.CONTENDED: (AckDecision(action=Action.NAK, delay_s=0.5),
                            AckDecision(action=Action.NAK, delay_s=0.5)),
    Disposition.UNAVAILABLE: (AckDecision(action=Action.NAK, delay_s=0.5),
                              AckDecision(action=Action.NAK, delay_s=15.0)),
}


@pytest.mark.parametrize("disposition", list(Disposition))
def test_the_table_walks_every_disposition(disposition: Disposition) -> None:
    first, late = TABLE[disposition]
    assert decide(disposition, delivered=1, backoff=B, rand=lambda: 0.5) == first
    assert decide(disposition, delivered=50, backoff=B, rand=lambda: 0.5) == late


def test_only_a_message_that_can_never_succeed_is_dead_lettered() -> None:
    # However many deliveries an outage lasts, it is nak'ed, never ended: there is no
    # delivery limit in the table itself, only the budget a consumer asks about for RETRY.
    for delivered in (1, 10, 1_000, 10**9):
        for disposition in Disposition:
            decision = decide(disposition, delivered=delivered, backoff=B, rand=lambda: 0.9)
            dead = decision.action is Action.DEAD_LETTER
            assert dead is (disposition is Disposition.NEVER_SUCCEEDS)
            if disposition is Disposition.UNAVAILABLE:
                assert B.base_s <= decision.delay_s <= B.cap_s
