"""What to tell JetStream about each envelope once its batch has been handled.

The rule: acknowledge an envelope only when it has its one recorded status in Postgres
(new, duplicate, or found already recorded by an earlier delivery). Everything else is
negatively acknowledged with a delay, so JetStream redelivers it later — never immediately
(no hot loop) and never dropped (the consumer has no delivery limit; the publish budget
below turns a persistent failure into a recorded ``failed_terminal`` instead).

==================  ===============================================  =====================
disposition         meaning                                          action
==================  ===============================================  =====================
``RECORDED``        its status is committed                          ack
``PUBLISH_RETRY``   publish failed, deliveries remain in the budget  nak, backoff by delivery
``CONTENDED``       another consumer is recording the same key now   nak, base delay
``UNAVAILABLE``     a dependency failed before anything was recorded nak, backoff by delivery
==================  ===============================================  =====================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from stages.ingest.retry_policy import Backoff, Rand


class Disposition(StrEnum):
    """Where an envelope stands after its batch was handled."""

    RECORDED = "recorded"
    PUBLISH_RETRY = "publish_retry"
    CONTENDED = "contended"
    UNAVAILABLE = "unavailable"


class Action(StrEnum):
    ACK = "ack"
    NAK = "nak"


@dataclass(frozen=True, kw_only=True, slots=True)
class AckDecision:
    """``ack``, or ``nak`` with the delay before JetStream redelivers."""

    action: Action
    delay_s: float = 0.0


ACK = AckDecision(action=Action.ACK)


def decide(
    disposition: Disposition, *, delivered: int, backoff: Backoff, rand: Rand
) -> AckDecision:
    """The acknowledgement for one envelope delivered ``delivered`` times (this one included)."""
    if disposition is Disposition.RECORDED:
        return ACK
    if disposition is Disposition.CONTENDED:
        return AckDecision(action=Action.NAK, delay_s=backoff.base_s)
    return AckDecision(action=Action.NAK, delay_s=backoff.floored_delay(delivered - 1, rand))


def publish_failure_is_final(*, delivered: int, max_deliver: int) -> bool:
    """Whether a failed publish ends the envelope (``failed_terminal`` + dead letter).

    The publish budget is ``max_deliver`` deliveries, each with its own in-delivery retries:
    an outage shorter than that heals by itself through redelivery; a longer one (or a
    side effect that is refused every time) is recorded and dead-lettered for redrive.
    """
    return delivered >= max_deliver
