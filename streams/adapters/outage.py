"""Dependency outages as the logs tell them: one WARNING when one starts, one INFO when it ends.

A dependency that is down fails every batch, every retry and every reconnect attempt; logging
each of those buried the one fact an operator needs (Postgres has been down since 12:03) under
hundreds of identical lines, while an outage that only made envelopes wait for redelivery (Redis
down for 15 s) logged nothing at all. Each place on the ingest path that handles a dependency
failure reports it to that dependency's :class:`Outage` instead:

* :meth:`Outage.failed` on every failure: the first one after a success logs
  ``WARNING <dependency> unavailable: <reason>``; the rest of the outage is silent;
* :meth:`Outage.recovered` on every success: the first one after a failure logs
  ``INFO <dependency> available again after <N> s``.

These are expected failures, so no traceback is logged: the reason (a Tideway error with its
stable code, or the driver's message) says what happened. A truly unexpected exception is still
logged with its traceback where it is caught. The batches themselves are deferred or retried by
the caller exactly as before; only the logging is shared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from streams.errors import TidewayError

log = logging.getLogger(__name__)


class Outage:
    """Whether one dependency is down, and since when (one per dependency per process)."""

    def __init__(self, dependency: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.dependency = dependency
        self._clock = clock
        self._since: float | None = None

    @property
    def down(self) -> bool:
        """Whether the last report was a failure."""
        return self._since is not None

    def failed(self, reason: BaseException | str) -> None:
        """A call to the dependency failed; logs a WARNING if it was up until now."""
        if self._since is not None:
            return
        self._since = self._clock()
        log.warning("%s unavailable: %s", self.dependency, describe(reason))

    def recovered(self) -> None:
        """A call to the dependency succeeded; logs an INFO if it was down until now."""
        since, self._since = self._since, None
        if since is not None:
            log.info("%s available again after %.1f s", self.dependency, self._clock() - since)


def describe(reason: BaseException | str) -> str:
    """A failure in one line: an exception with its type (many driver errors say nothing
    without it: ``TimeoutError()``, ``UnexpectedEOF``); a Tideway error as the driver error it
    translated, if any, followed by its stable code."""
    if isinstance(reason, str):
        return reason
    if isinstance(reason, TidewayError):
        cause = reason.__cause__
        text = describe(cause) if cause is not None else reason.message
        return f"{text} ({reason.code})"
    text = str(reason)
    return f"{type(reason).__name__}: {text}" if text else type(reason).__name__


@dataclass(frozen=True, kw_only=True, slots=True)
class Outages:
    """The trackers of the ingest path's four dependencies (one set per process)."""

    postgres: Outage = field(default_factory=lambda: Outage("postgres"))
    redis: Outage = field(default_factory=lambda: Outage("redis"))
    clickhouse: Outage = field(default_factory=lambda: Outage("clickhouse"))
    nats: Outage = field(default_factory=lambda: Outage("nats"))
