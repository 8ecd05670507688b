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

A process that needs a dependency before it can start (intake's Postgres pool, the ingest
consumer's connections) waits it out with :func:`wait_out`: tries again, with growing jittered
waits (tenacity), on every ``TransientError``, for as long as the outage lasts or until the
process is told to stop, and reports the outage once, as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
    wait_fixed,
    wait_random_exponential,
)

from streams.errors import TidewayError, TransientError

T = TypeVar("T")

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


async def wait_out(
    open_: Callable[[], Awaitable[T]],
    *,
    stop: asyncio.Event,
    outage: Outage | None,
    initial_s: float,
    max_s: float,
) -> T | None:
    """``await open_()`` until it raises no ``TransientError``; ``None`` if ``stop`` is set
    first. Waits ``initial_s`` plus a full-jitter share of a ceiling doubling from
    ``initial_s`` to ``max_s`` between tries; the first failure is reported to ``outage``
    (one WARNING), the success after it too (one INFO); pass ``None`` when ``open_`` reports
    its failures itself. Any other error is raised at once."""

    def failed(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if outage is not None and exc is not None:
            outage.failed(exc)

    async def tries() -> T:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransientError),
            # Full jitter over a floor: spread out, never a hot loop.
            wait=wait_fixed(initial_s) + wait_random_exponential(multiplier=initial_s, max=max_s),
            stop=stop_never,
            before_sleep=failed,
            reraise=True,
        )
        async def call() -> T:  # a coroutine function: tenacity would not await a lambda's
            return await open_()

        opened: T = await retrying(call)
        if outage is not None:
            outage.recovered()
        return opened

    attempt = asyncio.ensure_future(tries())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({attempt, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not attempt.done():
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt
    if attempt.cancelled():
        return None
    return attempt.result()
