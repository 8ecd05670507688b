"""What to tell JetStream about a message once its consumer has handled it.

One table for every JetStream consumer in Tideway: ``tideway ingest`` (TELEMETRY envelopes,
:mod:`streams.ingest.pipeline`) and intake (SESSIONS notices, :mod:`streams.sessions.intake`).
Each consumer works out where a message stands (its *disposition*); this module alone turns
that into an action, with the one backoff of :mod:`stages.backoff`.

The rule: acknowledge a message only when its outcome is recorded; terminate one only once a
dead letter holds it; negatively acknowledge everything else with a delay, so JetStream
redelivers it later — never immediately (no hot loop) and never dropped. Neither consumer has
a JetStream delivery limit: an outage, however long, only defers messages.

==================  ==================================================  ========================
disposition         meaning                                             action
==================  ==================================================  ========================
``RECORDED``        its outcome is committed (new, duplicate, or found  ack
                    already recorded by an earlier delivery)
``NEVER_SUCCEEDS``  it can never succeed (a bad notice, an unknown      dead letter, then term
                    artifact, refused by validation) and no row records
                    that: the dead letter is its record
``RETRY``           a step failed that may fail on every delivery (a    nak, backoff by delivery
                    side effect refused or its sink down, a bug) and
                    deliveries remain in the budget (:func:`budget_spent`)
``CONTENDED``       another consumer is recording the same key now      nak, base delay
``UNAVAILABLE``     nothing could be recorded: a store the consumer     nak, backoff by delivery
                    records in is down (Postgres, the object store,
                    NATS) — never budgeted, it waits out the outage
==================  ==================================================  ========================

Ingest records its refusals in Postgres (a ``failed_validation`` status with its dead letter,
in the same transaction), so they reach this table as ``RECORDED``; intake has no such row, so
a notice it refuses is ``NEVER_SUCCEEDS``. A ``RETRY`` whose budget is spent is the consumer's
to end: ingest records it ``failed_terminal`` with a dead letter (``RECORDED``), intake
dead-letters it (``NEVER_SUCCEEDS``).

Dead-lettering is a publish and can fail itself: a message whose dead letter was not stored
is ``UNAVAILABLE`` (nak'ed and retried), never terminated — nothing is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from stages.backoff import Backoff, Rand


class Disposition(StrEnum):
    """Where a message stands after its consumer handled it (see the module's table)."""

    RECORDED = "recorded"
    NEVER_SUCCEEDS = "never_succeeds"
    RETRY = "retry"
    CONTENDED = "contended"
    UNAVAILABLE = "unavailable"


class Action(StrEnum):
    """What the consumer sends to JetStream."""

    ACK = "ack"
    NAK = "nak"
    DEAD_LETTER = "dead_letter"
    """Publish the message to its dead-letter stream, then terminate it (``+TERM``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AckDecision:
    """``ack``, ``dead_letter``, or ``nak`` with the delay before JetStream redelivers."""

    action: Action
    delay_s: float = 0.0


ACK = AckDecision(action=Action.ACK)
DEAD_LETTER = AckDecision(action=Action.DEAD_LETTER)


def decide(
    disposition: Disposition, *, delivered: int, backoff: Backoff, rand: Rand
) -> AckDecision:
    """The decision for one message delivered ``delivered`` times (this one included)."""
    if disposition is Disposition.RECORDED:
        return ACK
    if disposition is Disposition.NEVER_SUCCEEDS:
        return DEAD_LETTER
    if disposition is Disposition.CONTENDED:
        return AckDecision(action=Action.NAK, delay_s=backoff.base_s)
    # RETRY and UNAVAILABLE: full jitter growing with the deliveries, floored so that a
    # dependency that fails fast cannot turn redelivery into a hot loop.
    return AckDecision(action=Action.NAK, delay_s=backoff.floored_delay(delivered - 1, rand))


def budget_spent(*, delivered: int, max_deliver: int) -> bool:
    """Whether a ``RETRY`` on delivery ``delivered`` ends the message instead.

    The budget is ``max_deliver`` deliveries (``consumer.max_deliver``), each with its own
    in-delivery retries where the consumer has them: a failure that heals within it costs a
    few redeliveries; one that repeats on every delivery (a side effect refused every time, a
    poison message) ends in a dead letter an operator can redrive, instead of cycling forever.
    It is only ever asked about a ``RETRY``: an ``UNAVAILABLE`` delivery never ends a message,
    however many deliveries there were (nothing could record the end then).
    """
    return delivered >= max_deliver
