"""The publish stage: hot state and analytics for a batch, with bounded retries.

Both sinks run concurrently. Each is retried within the delivery with full-jitter backoff
(``retry.publish_attempts`` tries, ``publish_base_s``/``publish_cap_s``); the hot state
retries only the keys that failed. What still fails is reported per envelope as
:class:`stages.ingest.plan.PublishFailure`; the caller decides, by the delivery budget
(:func:`stages.ack_policy.budget_spent`), whether that ends the envelope
or earns it a redelivery. Both sinks are idempotent, so publishing again is always safe.
Every failed and every successful call is reported to the process's Redis and ClickHouse
:class:`streams.adapters.outage.Outage`, which logs when a sink goes down and comes back.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import TypeVar

import orjson

from stages.backoff import Backoff
from stages.ingest.evaluate import Evaluation
from stages.ingest.plan import PublishFailure, PublishOutcome, hot_state_order
from streams.adapters.outage import Outages
from streams.errors import TidewayError
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import FAILED, WRITTEN, HotItem, HotState
from streams.names import Names
from streams.observability import tracing

T = TypeVar("T")

HOT_STATE = "hot_state"
ANALYTICS = "analytics"
"""The sinks, as publish failures and the publish metrics name them."""


class Publisher:
    """Publishes completed envelopes to Redis and ClickHouse."""

    def __init__(self, *, hot_state: HotState, analytics: Analytics, names: Names,
                 attempts: int, backoff: Backoff, rand: random.Random | None = None,
                 outages: Outages | None = None) -> None:
        self.hot_state = hot_state
        self.analytics = analytics
        self.names = names
        self.attempts = attempts
        self.backoff = backoff
        self.rand = rand or random.Random()
        self.outages = outages or Outages()
        self._tries: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()

    def take_tries(self) -> tuple[Counter[str], Counter[str]]:
        """Tries and failed tries of each sink since the last call (for the metrics: each
        batch takes what accumulated, so concurrent batches still sum exactly)."""
        tries, failed = self._tries, self._failed
        self._tries, self._failed = Counter(), Counter()
        return tries, failed

    def hot_items(self, evaluations: Sequence[Evaluation]) -> list[HotItem]:
        prefix = self.names.hot_state_key("", "")[:-1]  # "<prefix>state:" + tenant:device
        items = []
        for ev in evaluations:
            env, parts = ev.envelope, ev.parts
            assert env is not None and parts is not None and ev.values_json is not None
            items.append(hot_item(f"{prefix}{parts.tenant}:{parts.device}", parts.topic,
                                  env.ts, env.ts_us, env.seq, ev.key, ev.receipt.received_iso,
                                  ev.values_json))
        return items

    async def publish(self, evaluations: Sequence[Evaluation],
                      timings: dict[str, float] | None = None) -> list[PublishOutcome]:
        """Publish every envelope; one outcome per envelope, in order.

        ``timings``, when given, gets each sink's seconds (``hot_state``, ``analytics``: they
        run concurrently, so the publish took the longer of the two)."""
        if not evaluations:
            return []
        started = time.perf_counter_ns()
        (hot, hot_failures), analytics_failure = await asyncio.gather(
            _timed(self._hot_state(evaluations), HOT_STATE, timings),
            _timed(self._analytics(evaluations), ANALYTICS, timings),
        )
        duration_us = (time.perf_counter_ns() - started) // 1000
        # Outcomes are immutable: envelopes that ended alike share one object.
        shared = {
            written: PublishOutcome(duration_us=duration_us, hot_state_written=written,
                                    analytics_published=analytics_failure is None,
                                    failures=() if analytics_failure is None
                                    else (analytics_failure,))
            for written in (True, False)
        }
        outcomes = []
        for index in range(len(evaluations)):
            failure = hot_failures.get(index)
            if failure is None:
                outcomes.append(shared[hot[index] == WRITTEN])
                continue
            failures = (failure,) if analytics_failure is None else (failure, analytics_failure)
            outcomes.append(PublishOutcome(
                duration_us=duration_us, hot_state_written=False,
                analytics_published=analytics_failure is None, failures=failures,
            ))
        return outcomes

    async def _hot_state(
        self, evaluations: Sequence[Evaluation]
    ) -> tuple[list[int], dict[int, PublishFailure]]:
        items = self.hot_items(evaluations)
        results = [FAILED] * len(items)
        pending = list(range(len(items)))
        error: TidewayError | None = None
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff.delay(attempt - 1, self.rand.random))
            self._tries[HOT_STATE] += 1
            try:
                with tracing.span("redis.hot_state", {"tideway.attempt": attempt + 1}):
                    answer = await self.hot_state.offer([items[i] for i in pending])
            except Exception as exc:  # every failure is reported, none is fatal
                self._failed[HOT_STATE] += 1
                error = _as_tideway(exc)
                self.outages.redis.failed(error)
                continue
            # Redis answered (a key it refused for its own content is no outage).
            self.outages.redis.recovered()
            for index, result in zip(pending, answer, strict=True):
                results[index] = result
            pending = [i for i in pending if results[i] == FAILED]
            if not pending:
                break
            self._failed[HOT_STATE] += 1
            error = TidewayError("Redis refused the hot-state write for this key",
                                 code="REDIS_KEY_ERROR")
        failures = {}
        if pending and error is not None:
            failure = PublishFailure(sink=HOT_STATE, code=error.code, message=error.message,
                                     attempts=self.attempts)
            failures = dict.fromkeys(pending, failure)
        return results, failures

    async def _analytics(self, evaluations: Sequence[Evaluation]) -> PublishFailure | None:
        rows = self.analytics.rows(evaluations)
        error: TidewayError | None = None
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff.delay(attempt - 1, self.rand.random))
            self._tries[ANALYTICS] += 1
            try:
                with tracing.span("clickhouse.insert", {"tideway.attempt": attempt + 1}):
                    await self.analytics.insert(rows)
            except Exception as exc:  # every failure is reported, none is fatal
                self._failed[ANALYTICS] += 1
                error = _as_tideway(exc)
                self.outages.clickhouse.failed(error)
            else:
                self.outages.clickhouse.recovered()
                return None
        assert error is not None
        return PublishFailure(sink=ANALYTICS, code=error.code, message=error.message,
                              attempts=self.attempts)


async def _timed(work: Awaitable[T], name: str, timings: dict[str, float] | None) -> T:
    """``await work``, noting its seconds in ``timings[name]`` (when there are timings)."""
    if timings is None:
        return await work
    started = time.perf_counter()
    try:
        return await work
    finally:
        timings[name] = time.perf_counter() - started


def hot_item(key: str, topic: str, ts: datetime, ts_us: int, seq: int | None,
             message_key: str, received_iso: str, values_json: str) -> HotItem:
    """One measurement's hot-state entry (the document's layout: :mod:`hot_state`)."""
    # The values are already JSON: splice them in rather than encoding them again.
    head = orjson.dumps({"ts": ts, "seq": seq, "message_key": message_key,
                         "received_at": received_iso})
    doc = b"%s,\"values\":%s}" % (head[:-1], values_json.encode())
    return HotItem(key, topic, hot_state_order(ts_us, seq), doc)


def _as_tideway(exc: Exception) -> TidewayError:
    if isinstance(exc, TidewayError):
        return exc
    return TidewayError(f"{type(exc).__name__}: {exc}", code="PUBLISH_ERROR")
