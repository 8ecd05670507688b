"""``tideway ingest``: the consumer process loop.

Each of ``concurrency`` workers pulls a batch from the shared durable consumer, runs it
through :class:`streams.ingest.pipeline.Pipeline`, then acks what has its recorded status and
naks the rest with a delay. Any number of processes may run this against the same consumer.

Failure behaviour:

* a dependency is down (``TransientError``): the batch is nak'ed with a backoff delay and the
  worker pauses before its next fetch, growing with consecutive failures (full jitter,
  floored) — delayed redelivery, never a hot loop, never a lost envelope;
* an unexpected exception is logged and treated the same way; a poison envelope is isolated
  inside the pipeline, so it cannot stop its batch;
* ``stop`` (SIGTERM/SIGINT in the CLI) lets every worker finish, ack and return its current
  batch, then the connections are flushed and closed;
* a service that is down at start-up is waited for, with the same backoff.

An outage is logged once when it starts (WARNING) and once when it ends (INFO), through the
process's :class:`streams.adapters.outage.Outages`; the batches it defers are logged at DEBUG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

from schemas.error_codes import INTERNAL_ERROR
from stages.ack_policy import Disposition, decide
from stages.ingest.ingress import Receipt
from streams.adapters import postgres
from streams.adapters.outage import Outages, describe, wait_out
from streams.adapters.postgres import Pool
from streams.collector import tuned_collector
from streams.config import Settings
from streams.errors import TransientError
from streams.ingest.fetch import Fetcher, acknowledge, pending_of, receipt_of
from streams.ingest.pipeline import Pipeline
from streams.ingest.resources import Resources
from streams.observability.events import BatchObserver, IngestBatchStats, ProcessHooks
from streams.observability.liveness import Heartbeat
from streams.observability.logs import log_context
from streams.observability.readiness import (
    clickhouse_check,
    nats_check,
    postgres_check,
    redis_check,
)
from streams.retention.maintain import maintenance_loop, run_round

log = logging.getLogger(__name__)


async def run_consumer(
    settings: Settings,
    *,
    stop: asyncio.Event,
    concurrency: int | None = None,
    on_batch: Callable[[IngestBatchStats], None] | None = None,
    hooks: ProcessHooks | None = None,
) -> None:
    """Consume the TELEMETRY stream until ``stop`` is set, then drain and return.

    ``on_batch`` sees each batch's :class:`IngestBatchStats` (progress displays, tests);
    ``hooks`` is the process's observability (readiness checks, heartbeats, the batch
    observer that feeds the metrics).
    """
    workers = concurrency or settings.consumer.concurrency
    warning = in_flight_warning(settings, workers)
    if warning:
        log.warning("%s", warning)
    resources = await _open(settings, workers, stop)
    if resources is None:  # stopped before the services came up
        return
    fetchers: list[Fetcher] = []
    try:
        pipeline = Pipeline(resources)
        names = resources.names
        stream, durable = names.telemetry_stream, names.ingest_durable
        for _ in range(workers):
            fetcher = Fetcher(resources.nc, stream=stream, durable=durable)
            fetchers.append(await fetcher.start())
        observer: BatchObserver | None = None
        beats: list[Heartbeat | None] = [None] * workers
        if hooks is not None:
            hooks.ready(
                "ingest",
                nats_check(resources.nc, stream=stream, durable=durable),
                postgres_check(resources.pool),
                redis_check(resources.redis),
                clickhouse_check(resources.clickhouse),
            )
            hooks.sample_consumer(resources.nc, stream=stream, durable=durable)
            observer = hooks.batches
            beats = [hooks.heartbeat(f"ingest-fetch-{i}") for i in range(workers)]
        report = _Report(on_batch=on_batch, observer=observer)
        # Partitions for now and ahead exist before the first batch (streams.retention).
        retention = hooks.retention if hooks is not None else None
        # Partition maintenance rides along: one consumer process at a time leads it
        # (streams.retention.maintain), as the maintenance role when one is configured.
        async with _maintenance_pool(settings, resources.pool) as upkeep:
            await run_round(upkeep, settings, wait=True, observer=retention)
            with tuned_collector():
                await asyncio.gather(maintenance_loop(upkeep, settings, stop, retention),
                                     *(_work(pipeline, f, stop, report, beat)
                                       for f, beat in zip(fetchers, beats, strict=True)))
    finally:
        if hooks is not None:
            await hooks.stopping("ingest")
        for fetcher in fetchers:
            await fetcher.stop()
        await resources.close()


@contextlib.asynccontextmanager
async def _maintenance_pool(settings: Settings, pool: Pool
                            ) -> AsyncIterator[Pool]:
    """The pool partition maintenance uses: ``pool`` itself, or a small one of the
    maintenance role's (``postgres_maintenance_dsn``: it owns the partitioned tables, which
    the ingest role must not)."""
    if settings.postgres_maintenance_dsn is None:
        yield pool
        return
    own = await postgres.create_pool(settings.postgres_maintenance(),
                                     postgres.streaming_pool(2))
    try:
        yield own
    finally:
        await own.close()


def in_flight_warning(settings: Settings, workers: int) -> str | None:
    """Why this process's pulls would come back short, if they would: JetStream stops
    delivering at ``max_ack_pending`` unacknowledged envelopes, shared by every process."""
    c = settings.consumer
    wanted = workers * c.batch_size
    if wanted <= c.max_ack_pending:
        return None
    return (f"{workers} batches of {c.batch_size} in flight want {wanted} unacknowledged "
            f"envelopes, more than consumer.max_ack_pending ({c.max_ack_pending}) allows for "
            "all processes together: pulls will come back short; raise max_ack_pending and run "
            "`tideway streams init`")


async def _open(settings: Settings, workers: int, stop: asyncio.Event) -> Resources | None:
    """Connect, retrying with backoff while a service is down (a consumer started before its
    database, say, waits for it instead of exiting)."""
    outages = Outages()  # kept across attempts: a service down at start-up is logged once
    pause = settings.retry
    # Resources.open reports each failure to ``outages`` itself.
    return await wait_out(
        lambda: Resources.open(settings, pool_size=workers + 2, outages=outages),
        stop=stop, outage=None, initial_s=pause.redelivery_delay_s,
        max_s=max(pause.redelivery_cap_s, pause.redelivery_delay_s),
    )


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


@dataclass(kw_only=True)
class _Report:
    """Where each batch is reported: the caller's ``on_batch`` and the process's observer."""

    on_batch: Callable[[IngestBatchStats], None] | None
    observer: BatchObserver | None
    batches: int = 0
    """Batches started by this process (the ``batch`` log field)."""

    def next_batch(self) -> int:
        self.batches += 1
        return self.batches

    def done(self, stats: IngestBatchStats, fetched: float) -> None:
        """Called once per batch, after its acks."""
        if self.on_batch is not None:
            try:
                self.on_batch(stats)
            except Exception:  # a progress callback must not stop ingestion
                log.exception("on_batch callback failed")
        if self.observer is not None:
            # The observer's batch duration runs from the fetch to the acks, not the pipeline's.
            self._observe(replace(stats, duration_s=time.perf_counter() - fetched,
                                  acked_ns=time.time_ns()))  # fmt: skip

    def deferred(self, receipts: Sequence[Receipt], reason: str, fetched: float) -> None:
        """A whole batch was nak'ed (a dependency is down, or a bug)."""
        if self.observer is not None:
            self._observe(IngestBatchStats(
                size=len(receipts), duration_s=time.perf_counter() - fetched,
                redelivered=sum(1 for r in receipts if r.delivered > 1),
                naks={reason: len(receipts)},
            ))

    def _observe(self, stats: IngestBatchStats) -> None:
        assert self.observer is not None
        try:
            self.observer.on_batch(stats)
        except Exception:  # metrics must not stop ingestion either
            log.exception("batch observer failed")


async def _work(pipeline: Pipeline, fetcher: Fetcher, stop: asyncio.Event, report: _Report,
                beat: Heartbeat | None) -> None:
    settings = pipeline.settings
    consumer = settings.consumer
    nc = pipeline.resources.nc
    outages = pipeline.resources.outages
    rand = random.Random()
    pause = settings.retry.redelivery_backoff()
    failures = 0
    paced_until = 0.0
    while not stop.is_set():
        if beat is not None:
            beat.tick()
        # Caught up with the stream: leave the next batch a moment to form (the other workers
        # still pull meanwhile). With a backlog, pull at once.
        wait = paced_until - time.perf_counter()
        if wait > 0:
            await _pause(stop, wait)
            if stop.is_set():
                break
        try:
            msgs = await fetcher.fetch(consumer.batch_size, consumer.max_wait_s)
        except Exception as exc:  # NATS reconnecting; try again shortly
            outages.nats.failed(exc)
            log.debug("fetch failed: %s", describe(exc))
            await _pause(stop, pause.floored_delay(0, rand.random))
            continue
        if not msgs:
            continue
        fetched = time.perf_counter()
        caught_up = len(msgs) < consumer.batch_size and pending_of(msgs[-1]) == 0
        paced_until = fetched + consumer.batch_interval_s if caught_up else 0.0
        # Messages only arrive over a live connection. (An empty fetch proves nothing: while
        # nats-py reconnects, the pull request is buffered and the fetch just times out.)
        outages.nats.recovered()
        receipts = [receipt_of(m) for m in msgs]
        with log_context(batch=report.next_batch()):
            try:
                result = await pipeline.process(receipts)
            except Exception as exc:  # the batch is redelivered later, not lost
                failures += 1
                if isinstance(exc, TransientError):  # Postgres: the only dependency it raises for
                    outages.postgres.failed(exc)
                    log.debug("batch of %d deferred: %s", len(msgs), describe(exc))
                    reason = exc.code
                else:
                    log.exception("batch of %d failed unexpectedly; deferring it", len(msgs))
                    reason = INTERNAL_ERROR
                decisions = tuple(
                    decide(Disposition.UNAVAILABLE, delivered=r.delivered, backoff=pause,
                           rand=rand.random)
                    for r in receipts
                )
                await acknowledge(nc, msgs, decisions)
                report.deferred(receipts, reason, fetched)
                await _pause(stop, pause.floored_delay(failures - 1, rand.random))
                continue
            failures = 0
            outages.postgres.recovered()
            await acknowledge(nc, msgs, result.decisions)
            report.done(result.stats, fetched)
