"""One batch through the whole pipeline: evaluate, dedupe, publish, record, decide acks.

Round trips per batch, whatever its size: at most two registry queries (cache misses only),
one dedupe read, one Redis script call and one ClickHouse insert (concurrently), one
recording transaction (insert + two ``COPY`` + duplicates/dead letters when present), then
the acks. See :mod:`stages.ingest.plan` for why publishing before the recording transaction
is crash-safe: both sinks are idempotent, so a crash in between only causes a harmless
re-publish when JetStream redelivers.

The consumer (``consumer.py``), ``tideway replay`` and ``tideway dlq`` all feed receipts
through :meth:`Pipeline.process`.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from schemas.envelope import epoch_us
from schemas.error_codes import PERSIST_REJECTED
from stages.ack_policy import (
    ACK,
    AckDecision,
    Disposition,
    budget_spent,
    decide,
)
from stages.ingest.evaluate import Evaluation, Registry, evaluate
from stages.ingest.ingress import Receipt, SubjectParts, iso_utc, parse_subject
from stages.ingest.plan import (
    Classified,
    Fate,
    Final,
    PublishOutcome,
    classify,
    delivery_failure_row,
    finalize,
)
from streams.adapters.errors import PG_FAILURES, translate_pg
from streams.adapters.outage import describe
from streams.ingest import sql
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import HotItem, HotState
from streams.ingest.publish import Publisher, hot_item
from streams.ingest.recorder import Recorded, Recorder, lookup
from streams.ingest.registry_cache import RegistryCache
from streams.ingest.resources import Resources
from streams.observability import tracing
from streams.observability.events import IngestBatchStats

log = logging.getLogger(__name__)

PREPARE = "prepare"
"""A batch's first phase: the registry, the pure stages and the dedupe read."""
RECORD = "record"
"""Its last: the recording transaction (with any failed deliveries noted before it). The
phases between are the sinks, ``hot_state`` and ``analytics``, which run concurrently."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchResult:
    """Per-receipt acknowledgement decisions, in input order, and the batch's stats."""

    decisions: tuple[AckDecision, ...]
    stats: IngestBatchStats
    message_ids: Mapping[int, int]
    """Batch index → ``ingestion_messages`` id now holding that envelope's status."""


class Pipeline:
    """The streaming pipeline over one process's :class:`Resources`."""

    def __init__(self, resources: Resources, *, rand: random.Random | None = None) -> None:
        settings = resources.settings
        self.resources = resources
        self.settings = settings
        self.rand = rand or random.Random()
        self.prefix = settings.namespace
        self.cache = RegistryCache(ttl_s=settings.consumer.registry_ttl_s)
        self.analytics = Analytics(resources.clickhouse, resources.names.analytics_table)
        self.recorder = Recorder(resources.pool, capture=settings.consumer.capture_stage_snapshots,
                                 namespace=settings.namespace)
        retry = settings.retry
        self.publisher = Publisher(
            hot_state=HotState(resources.redis), analytics=self.analytics, names=resources.names,
            attempts=retry.publish_attempts,
            backoff=retry.publish_backoff(),
            rand=self.rand, outages=resources.outages,
        )
        self.redelivery = retry.redelivery_backoff()

    def evaluate_all(
        self, receipts: Sequence[Receipt], registry: Registry,
        parts: Sequence[SubjectParts | None] | None = None,
    ) -> list[Evaluation]:
        """Run the pure stages over every receipt (``parts``: their parsed subjects, if known)."""
        consumer = self.settings.consumer
        clock = time.perf_counter_ns
        limit, capture, prefix = (consumer.max_payload_bytes, consumer.capture_stage_snapshots,
                                  self.prefix)
        if parts is None:
            parts = [parse_subject(r.subject, prefix) for r in receipts]
        return [
            evaluate(r, registry, prefix=prefix, max_payload_bytes=limit, capture=capture,
                     clock=clock, parts=p)
            for r, p in zip(receipts, parts, strict=True)
        ]

    async def prepare(
        self, receipts: Sequence[Receipt]
    ) -> tuple[list[Evaluation], list[Classified], int]:
        """Evaluate every receipt and classify it against Postgres (registry + dedupe read);
        also the dedupe generation the read saw (for :meth:`Recorder.record_safely`)."""
        parts = [parse_subject(r.subject, self.prefix) for r in receipts]
        # Only well-formed names ever reach a query.
        pairs = [(p.tenant, p.device) for p in parts if p is not None]
        try:
            async with self.resources.pool.acquire() as conn:
                with tracing.span("postgres.registry"):
                    view = await self.cache.view(conn, pairs)
                evaluations = self.evaluate_all(receipts, view, parts)
                with tracing.span("postgres.dedupe_read"):
                    existing, gen = await lookup(conn, evaluations)
        except PG_FAILURES as exc:
            raise translate_pg(exc) from exc
        return evaluations, classify(evaluations, existing), gen

    async def process(self, receipts: Sequence[Receipt]) -> BatchResult:
        """Run a batch; raises ``TransientError`` when Postgres is unreachable.

        With tracing on, the batch is one ``ingest.batch`` span linked to each envelope's
        ``traceparent``; with it off, that costs one check per batch.
        """
        if not tracing.active():
            return await self._process(receipts)
        with tracing.batch_span((r.traceparent for r in receipts),
                                {"tideway.batch.size": len(receipts)}):
            return await self._process(receipts)

    async def _process(self, receipts: Sequence[Receipt]) -> BatchResult:
        started = time.perf_counter()
        evaluations, fates, gen = await self.prepare(receipts)
        phases = {PREPARE: time.perf_counter() - started}
        new = [i for i, f in enumerate(fates) if f.fate is Fate.NEW]
        to_publish = [i for i in new if evaluations[i].needs_publish]
        outcomes: dict[int, PublishOutcome] = dict(zip(
            to_publish,
            await self.publisher.publish([evaluations[i] for i in to_publish], phases),
            strict=True,
        ))
        dispositions = [Disposition.RECORDED] * len(receipts)
        finals: dict[int, Final] = {}
        failed_deliveries: list[tuple[str, int, str]] = []
        max_deliver = self.settings.consumer.max_deliver
        now = datetime.now(UTC)
        for index in new:
            outcome = outcomes.get(index)
            delivered = evaluations[index].receipt.delivered
            if outcome is not None and not outcome.ok and not budget_spent(
                delivered=delivered, max_deliver=max_deliver
            ):
                dispositions[index] = Disposition.RETRY
                failed_deliveries.append(delivery_failure_row(evaluations[index], outcome, now))
                continue
            finals[index] = finalize(evaluations[index], outcome)
        # Noted before recording: should the recording fail, the batch is redelivered and
        # each of these deliveries did fail to publish all the same.
        recording = time.perf_counter()
        await self.recorder.note_failed_deliveries(failed_deliveries)
        recorded = await self.recorder.record_safely(evaluations, fates, finals, gen=gen)
        phases[RECORD] = time.perf_counter() - recording
        for index in recorded.contended:
            dispositions[index] = Disposition.CONTENDED
        if recorded.refused:
            await self._withdraw_refused(recorded.refused, evaluations, outcomes)
        if recorded.dead_letters:
            await self._announce(recorded)
        recorded_ = Disposition.RECORDED
        decisions = tuple(
            ACK if d is recorded_ else
            decide(d, delivered=r.delivered, backoff=self.redelivery, rand=self.rand.random)
            for d, r in zip(dispositions, receipts, strict=True)
        )
        already = sum(1 for i, f in enumerate(fates) if f.fate is Fate.RECORDED
                      and dispositions[i] is Disposition.RECORDED)
        # One pass per batch for the observers (never one call per envelope).
        outcome_counts: Counter[tuple[str, str]] = Counter()
        for index, status in recorded.statuses.items():
            final = finals.get(index)
            code = (PERSIST_REJECTED if index in recorded.refused
                    else final.error_code if final is not None and final.error_code else "")
            outcome_counts[(status.value, code)] += 1
        statuses: Counter[str] = Counter()
        for (status_value, _), count in outcome_counts.items():
            statuses[status_value] += count
        naks: Counter[str] = Counter()
        for index, disposition in enumerate(dispositions):
            if disposition is Disposition.CONTENDED:
                naks["contended"] += 1
            elif disposition is not Disposition.RECORDED:
                failed = outcomes.get(index)
                naks[failed.failures[0].code if failed and failed.failures else "retry"] += 1
        tries, failed_tries = self.publisher.take_tries()
        hits, misses = self.cache.take_counts()
        stats = IngestBatchStats(
            size=len(receipts),
            statuses=statuses,
            already_recorded=already,
            retried=sum(1 for d in dispositions if d is not Disposition.RECORDED),
            dead_lettered=len(recorded.dead_letters),
            duration_s=time.perf_counter() - started,
            stored_at_ns=tuple(r.received_at_ns for r in receipts),
            finished_at_ns=time.time_ns(),
            outcomes=outcome_counts,
            redelivered=sum(1 for r in receipts if r.delivered > 1),
            naks=naks,
            dead_letters=Counter(code for _, _, code in recorded.dead_letters),
            publish_attempts=tries,
            publish_failures=failed_tries,
            dedupe_hits=sum(1 for f in fates if f.fate is not Fate.NEW),
            registry_hits=hits,
            registry_misses=misses,
            phases_s=phases,
        )
        return BatchResult(decisions=decisions, stats=stats, message_ids=recorded.message_ids)

    async def _withdraw_refused(self, refused: set[int], evaluations: Sequence[Evaluation],
                                outcomes: Mapping[int, PublishOutcome]) -> None:
        """Take envelopes Postgres refused back out of the sinks they were published to.

        Publishing comes before the recording transaction, so an envelope whose rows Postgres
        then refused (``PERSIST_REJECTED``) is already in the hot state and the analytics;
        nothing may stay published that has no record. Its analytics rows are deleted, and
        where its document is still its device's hot state, the newest measurement Postgres
        holds takes its place (or the topic is cleared). Best effort: a sink that fails now
        is logged, and the dead letter says what was refused.
        """
        published = [(evaluations[i], outcomes[i]) for i in sorted(refused) if i in outcomes]
        keys = [ev.key for ev, outcome in published if outcome.analytics_published]
        try:
            await self.analytics.withdraw(keys)
        except Exception as exc:
            log.warning("could not delete the analytics rows of %d refused envelopes: %s",
                        len(keys), exc)
        hot = [ev for ev, outcome in published if outcome.hot_state_written]
        for ev, item in zip(hot, self.publisher.hot_items(hot), strict=True):
            try:
                await self.publisher.hot_state.withdraw(item, await self._newest_kept(ev, item))
            except Exception as exc:
                log.warning("could not take refused envelope %s out of the hot state: %s",
                            ev.key, exc)

    async def _newest_kept(self, ev: Evaluation, item: HotItem) -> HotItem | None:
        """The hot-state entry of the newest processed measurement of ``ev``'s device and
        topic (``None`` if there is none)."""
        assert ev.device is not None
        try:
            async with self.resources.pool.acquire() as conn:
                row = await conn.fetchrow(sql.NEWEST_PROCESSED, ev.device.id, item.topic)
        except PG_FAILURES as exc:
            raise translate_pg(exc) from exc
        if row is None:
            return None
        measured = row["measured_at"]
        return hot_item(item.key, item.topic, measured, epoch_us(measured), row["seq"],
                        row["key"].hex, iso_utc(epoch_us(row["received_at"])),
                        row["values_json"])

    async def _announce(self, recorded: Recorded) -> None:
        """Copy each new dead letter to the DLQ stream, for alerting (best effort)."""
        js = self.resources.nc.jetstream()
        names = self.resources.names
        for message_id, ev, code in recorded.dead_letters:
            headers = {
                "Nats-Msg-Id": f"dlq-{message_id}", "Tideway-Message-Id": str(message_id),
                "Tideway-Reason": code, "Tideway-Subject": ev.receipt.subject,
                "Tideway-Headers": orjson.dumps(dict(ev.receipt.headers or {})).decode(),
            }
            traceparent = ev.receipt.traceparent
            if traceparent is not None:  # the copy stays in the envelope's trace
                headers["traceparent"] = traceparent
            tenant = ev.parts.tenant if ev.parts else "unknown"
            nats = self.resources.outages.nats
            try:
                await js.publish(names.dead_letter_subject(tenant, code), ev.receipt.data,
                                 headers=headers, timeout=2)
            except Exception as exc:  # Postgres holds the dead letter already
                problem = (f"could not copy dead letter {message_id} to the DLQ stream: "
                           f"{describe(exc)}")
                nats.failed(problem)
                log.debug("%s", problem)
            else:
                nats.recovered()
