"""Full-jitter exponential backoff (spec 003), with the random source passed in.

``delay(attempt) = uniform(0, min(cap, base * 2**attempt))`` — the "full jitter" schedule:
retries from many consumers spread out instead of arriving together after an outage. The
random source is an argument (``rand() -> [0, 1)``), so tests pin it and the stage stays pure.

The one backoff of both JetStream consumers (their nak delays, see :mod:`stages.ack_policy`)
and of the publish retries within one delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Rand = Callable[[], float]

_MAX_EXPONENT = 62  # 2**62 already exceeds any sensible cap; avoids huge ints


@dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """An exponential backoff ceiling ``min(cap_s, base_s * 2**attempt)`` with full jitter."""

    base_s: float
    cap_s: float

    def __post_init__(self) -> None:
        if self.base_s <= 0 or self.cap_s < self.base_s:
            raise ValueError("backoff needs 0 < base_s <= cap_s")

    def ceiling(self, attempt: int) -> float:
        """The largest delay before retry number ``attempt`` (0 for the first retry)."""
        return min(self.cap_s, self.base_s * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT))

    def delay(self, attempt: int, rand: Rand) -> float:
        """A full-jitter delay before retry number ``attempt``."""
        return rand() * self.ceiling(attempt)

    def floored_delay(self, attempt: int, rand: Rand) -> float:
        """Like :meth:`delay` but never below ``base_s``.

        Used where a near-zero delay would turn into a hot loop (a redelivery after a
        dependency failed): the jitter still spreads consumers, the floor bounds the rate.
        """
        return max(self.base_s, self.delay(attempt, rand))

    def schedule(self, tries: int, rand: Rand) -> tuple[float, ...]:
        """The sleeps between ``tries`` attempts of one operation (``tries - 1`` of them)."""
        return tuple(self.delay(i, rand) for i in range(max(tries - 1, 0)))
