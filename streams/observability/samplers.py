"""Gauges of shared state, sampled at a slow interval with one cheap query each.

Queue depth and JetStream pending describe the whole system, not one process, so they are not
derived from events: a sampler asks the source of truth every ``sample_interval_s`` (15 s by
default). Every process that runs a sampler exports the same figure; dashboards and alerts take
``max`` over instances, never ``sum``.

SQL conventions as in ``streams/jobs/sql.py``: ``$1`` is ``now``, passed in so tests can pin it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from streams.adapters.nats import JetStreamContext
from streams.adapters.postgres import Pool
from streams.observability.metrics import Metrics

log = logging.getLogger(__name__)

Sampler = Callable[[], Awaitable[None]]

# Only the states that have a partial index (ix_jobs_claim: queued, ix_jobs_retry: retry_wait,
# ix_jobs_active: running/cancel_requested), so the planner can read those small indexes
# (a BitmapOr) instead of the table's ever-growing history of finished jobs. The predicate is
# spelled as one OR term per index predicate on purpose: Postgres proves a partial index usable
# only for a term that matches its WHERE clause, and a single `state IN (...four...)` matches
# none of them. 'created' (waiting for dependencies) has no index and is left out: it is not
# work a worker could pick up.
QUEUE_DEPTH_SQL = """
SELECT job_type, state, count(*) AS jobs
FROM jobs
WHERE state = 'queued'
   OR state = 'retry_wait'
   OR state IN ('running', 'cancel_requested')
GROUP BY 1, 2
"""
QUEUE_STATES = ("queued", "retry_wait", "running", "cancel_requested")

# Per worker, the oldest heartbeat among the jobs it holds: the one the reaper will find first.
# Reads ix_jobs_active only.
HEARTBEAT_AGE_SQL = """
SELECT locked_by AS worker_id,
       extract(epoch FROM $1::timestamptz - min(coalesce(heartbeat_at, locked_at)))::float8
           AS age_s
FROM jobs
WHERE state IN ('running', 'cancel_requested')
GROUP BY locked_by
"""


class JobQueueSampler:
    """Refreshes ``tideway_job_queue_depth`` and ``tideway_worker_heartbeat_age_seconds``."""

    def __init__(
        self, metrics: Metrics, pool: Pool,
        *, now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.metrics = metrics
        self.pool = pool
        self.now = now
        self._depth_seen: set[tuple[str, str]] = set()
        self._workers_seen: set[str] = set()

    async def __call__(self) -> None:
        """Run both queries and rewrite the gauges."""
        async with self.pool.acquire() as conn:
            depth = await conn.fetch(QUEUE_DEPTH_SQL)
            ages = await conn.fetch(HEARTBEAT_AGE_SQL, self.now())
        counts = {(r["job_type"], r["state"]): int(r["jobs"]) for r in depth}
        # A (type, state) pair that emptied reads 0 rather than vanishing, so a graph shows
        # the drop; job types are a small fixed set, so keeping their series costs nothing.
        for key in self._depth_seen - counts.keys():
            self.metrics.queue_depth.labels(*key).set(0)
        for key, count in counts.items():
            self.metrics.queue_depth.labels(*key).set(count)
        self._depth_seen |= counts.keys()
        # A worker with no running job any more has no heartbeat to be late: its series goes.
        current = {str(r["worker_id"]): float(r["age_s"]) for r in ages}
        for worker in self._workers_seen - current.keys():
            with contextlib.suppress(KeyError):
                self.metrics.heartbeat_age.remove(worker)
        for worker, age in current.items():
            self.metrics.heartbeat_age.labels(worker).set(max(age, 0.0))
        self._workers_seen = set(current)


class ConsumerSampler:
    """Refreshes the JetStream pending / ack-pending gauges of one durable consumer."""

    def __init__(self, metrics: Metrics, js: JetStreamContext, *, stream: str, durable: str):
        self.metrics = metrics
        self.js = js
        self.stream = stream
        self.durable = durable

    async def __call__(self) -> None:
        """One ``CONSUMER.INFO`` request."""
        info = await self.js.consumer_info(self.stream, self.durable)
        labels = (self.stream, self.durable)
        self.metrics.consumer_pending.labels(*labels).set(info.num_pending or 0)
        self.metrics.consumer_ack_pending.labels(*labels).set(info.num_ack_pending or 0)


async def run_samplers(
    samplers: Sequence[Sampler], *, interval_s: float, stop: asyncio.Event
) -> None:
    """Run every sampler now and then every ``interval_s`` until ``stop`` is set.

    A failing sampler logs a warning and leaves its gauges at their last value: the readiness
    checks, not the samplers, report a dependency that is down.
    """
    await asyncio.gather(*(sample_loop(s, lambda: False, interval_s, stop) for s in samplers))


async def sample_loop(
    sampler: Sampler, closed: Callable[[], bool], interval_s: float, stop: asyncio.Event
) -> None:
    """Run ``sampler`` now and every ``interval_s`` until ``stop`` or its connection closes.

    A failing sampler logs a warning and leaves its gauges at their last value: the readiness
    checks, not the samplers, report a dependency that is down. A connection its component
    has closed (the process is stopping) ends the loop quietly.
    """
    while not stop.is_set() and not closed():
        try:
            await sampler()
        except Exception as exc:
            if closed():
                return
            log.warning("metrics sampler %s failed: %s", type(sampler).__name__, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
