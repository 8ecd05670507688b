"""The write ceiling of the streaming pipeline: its writes and acks with every row built ahead.

``bench/ingest.py --modes sinks`` runs it. Before the clock starts, the pipeline's own code
(evaluate, classify, finalize, ``Recording``, ``Publisher.hot_items``, ``Analytics.rows``)
builds every row the full pipeline would write for the data set: the ``COPY`` lines of
``ingestion_messages``, ``device_telemetry_logs`` and ``ingestion_stage_passes``, the hot-state
items and the ClickHouse input rows. The timed part then does, per pulled batch and with the
consumer's batch size and batches in flight, exactly the round trips ``Pipeline.process``
makes, with the same clients and calls:

* the dedupe read (``sql.LOOKUP``);
* the Redis script call and the ClickHouse insert, concurrently;
* the recording transaction: the generation and reserved ids (one statement), then the
  four ``COPY``s (joined and encoded as ``copy_lines`` does it);
* the acks, as one write.

No stage runs, no row is built. So the rate it reaches is the most any consumer in this process
model could reach while writing what spec 001 asks for: the gap between it and the full pipeline
is the pipeline's own Python; the gap between it and the floor is the services' and clients'
share, which no change to the pipeline can remove.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import cpu
import pyarrow as pa
from nats.js.api import AckPolicy, ConsumerConfig

from stages.ack_policy import ACK
from stages.ingest.ingress import Receipt, key_hash
from stages.ingest.plan import Fate, PublishOutcome, Recording, finalize, value_layout
from streams.config import Settings
from streams.ingest import sql
from streams.ingest.fetch import Fetcher, acknowledge
from streams.ingest.hot_state import HotItem
from streams.ingest.pipeline import Pipeline
from streams.ingest.recorder import copy_lines
from streams.ingest.resources import Resources
from streams.names import Names

# A typical publish time, written into the stage-pass lines (its value does not change their
# size by more than a digit or two).
_PUBLISH_US = 2_000
_PERSIST_US = 1_000


@dataclass(frozen=True, slots=True)
class Prebuilt:
    """Everything the full pipeline writes for the data set, one entry per envelope (stage
    passes: one row per batch since migration 0019, keyed by the batch's first envelope)."""

    keys: list[str]
    receipts: list[str]
    messages: list[str]
    key_lines: list[str]
    telemetry: list[str]
    passes: dict[int, list[str]]
    hot: list[HotItem]
    analytics: pa.Table


async def prebuild(pipeline: Pipeline, names: Names, tenant: str,
                   data: list[tuple[str, bytes, str]], batch: int) -> Prebuilt:
    """Run the pipeline's pure stages over ``data`` and build its rows (not timed)."""
    now_ns = time.time_ns()
    keys: list[str] = []
    receipts: list[str] = []
    messages: list[str] = []
    key_lines: list[str] = []
    async with pipeline.resources.pool.acquire() as conn:
        gen = await conn.fetchval(sql.CURRENT_GENERATION)
    telemetry: list[str] = []
    passes: dict[int, list[str]] = {}
    hot: list[HotItem] = []
    tables = []
    published = PublishOutcome(duration_us=_PUBLISH_US, hot_state_written=True,
                               analytics_published=True)
    for start in range(0, len(data), batch):
        batch_receipts = [
            Receipt.of(subject=names.telemetry_subject(tenant, device, "state"), data=body,
                       headers={"Nats-Msg-Id": msg_id}, stream_seq=start + i + 1,
                       received_at_ns=now_ns + start + i)
            for i, (device, body, msg_id) in enumerate(data[start:start + batch])
        ]
        evaluations, fates, _ = await pipeline.prepare(batch_receipts)
        if any(f.fate is not Fate.NEW for f in fates) or not all(
                ev.needs_publish for ev in evaluations):
            raise RuntimeError("the write ceiling needs a data set of new, valid envelopes")
        async with pipeline.resources.pool.acquire() as conn:
            ids = await conn.fetchval(sql.RESERVE_IDS, len(evaluations))
        finals = [finalize(ev, published) for ev in evaluations]
        await pipeline.recorder.layouts.ensure(pipeline.resources.pool, map(value_layout, finals))
        rec = Recording(capture=False, now=datetime.now(UTC), gen=gen,
                        layouts=pipeline.recorder.layouts.ids)
        for final, message_id in zip(finals, ids, strict=True):
            rec.add(final, message_id)
        keys.extend(key_hash(ev.key) for ev in evaluations)
        receipts.extend(f"{ev.receipt.stream_seq}:{ev.receipt.received_at_ns // 1000}"
                        for ev in evaluations)
        messages.extend(rec.messages)
        key_lines.extend(rec.keys)
        telemetry.extend(rec.telemetry)
        passes[start] = rec.stage_pass_lines(_PERSIST_US)
        hot.extend(pipeline.publisher.hot_items(evaluations))
        tables.append(pipeline.analytics.rows(evaluations))
    return Prebuilt(keys, receipts, messages, key_lines, telemetry, passes, hot,
                    pa.concat_tables(tables).combine_chunks())


async def write_ceiling(settings: Settings, names: Names, tenant: str,
                        data: list[tuple[str, bytes, str]]) -> dict[str, Any]:
    """Pull the preloaded ``data`` and write its prebuilt rows (module docstring)."""
    consumer = settings.consumer
    batch, workers = consumer.batch_size, consumer.concurrency
    resources = await Resources.open(settings, name="bench-sinks", pool_size=workers + 2)
    fetchers: list[Fetcher] = []
    try:
        pipeline = Pipeline(resources)
        built = await prebuild(pipeline, names, tenant, data, batch)
        js = resources.nc.jetstream()
        await js.add_consumer(names.telemetry_stream, ConsumerConfig(
            durable_name="bench_sinks", ack_policy=AckPolicy.EXPLICIT,
            max_ack_pending=max(consumer.max_ack_pending, batch * workers)))
        for _ in range(workers):
            fetchers.append(await Fetcher(resources.nc, stream=names.telemetry_stream,
                                          durable="bench_sinks").start())
        n = len(data)
        claimed = [0]  # envelopes asked for and not given back
        taken = [0]  # prebuilt rows handed out
        pool, nc = resources.pool, resources.nc
        hot, analytics = pipeline.publisher.hot_state, pipeline.analytics

        async def work(fetcher: Fetcher) -> None:
            while claimed[0] < n:
                want = min(batch, n - claimed[0])
                claimed[0] += want
                msgs = await fetcher.fetch(want, 1.0)
                claimed[0] -= want - len(msgs)
                if not msgs:
                    continue
                start = taken[0]
                taken[0] += len(msgs)
                rows = slice(start, start + len(msgs))
                async with pool.acquire() as conn:
                    await conn.fetch(sql.LOOKUP, "\n".join(built.keys[rows]),
                                     "\n".join(built.receipts[rows]))
                await asyncio.gather(hot.offer(built.hot[rows]),
                                     analytics.insert(built.analytics.slice(start, len(msgs))))
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute(sql.WRITE_BARRIER, sql.DEDUPE_BARRIER_KEY)
                    await conn.fetchrow(sql.GENERATION_AND_IDS, len(msgs))
                    await copy_lines(conn, sql.MESSAGES, sql.MESSAGE_COPY, built.messages[rows])
                    await copy_lines(conn, sql.KEYS, sql.KEY_COPY, built.key_lines[rows])
                    await copy_lines(conn, sql.TELEMETRY, sql.TELEMETRY_COPY,
                                     built.telemetry[rows])
                    # The pass rows of the prebuilt batches that begin in this fetch.
                    await copy_lines(conn, sql.STAGE_PASSES, sql.STAGE_PASS_COPY,
                                     [line for first, lines in built.passes.items()
                                      if start <= first < start + len(msgs)
                                      for line in lines])
                await acknowledge(nc, msgs, (ACK,) * len(msgs))

        started, before = time.perf_counter(), cpu.sample()
        await asyncio.gather(*(work(f) for f in fetchers))
        elapsed = time.perf_counter() - started
        busy = cpu.busy_percent(before, cpu.sample())
        written = await _count(resources, len(built.keys),
                               sum(len(lines) for lines in built.passes.values()))
    finally:
        for fetcher in fetchers:
            await fetcher.stop()
        await resources.close()
    return {"envelopes": taken[0], "seconds": elapsed, "envelopes_per_s": taken[0] / elapsed,
            "rows_written": written, "cpu_busy_percent": busy}


async def _count(resources: Resources, envelopes: int, passes: int) -> dict[str, int]:
    """The rows the run wrote, checked against what it should have written (a message and a
    telemetry row per envelope, the stage-pass rows of every batch)."""
    expected = {sql.MESSAGES: envelopes, sql.TELEMETRY: envelopes, sql.STAGE_PASSES: passes}
    counts = {}
    async with resources.pool.acquire() as conn:
        for table in expected:
            counts[table] = await conn.fetchval(f"SELECT count(*) FROM {table}")
    if counts != expected:
        raise RuntimeError(f"the write ceiling wrote {counts}, expected {expected}")
    return counts
