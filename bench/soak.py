"""Soak benchmark: the full pipeline over many rounds while retention creates and drops
partitions, to show throughput, bytes per envelope and total bytes flat over time.

Run:  .venv/bin/python bench/soak.py                                  # 10 million envelopes
      .venv/bin/python bench/soak.py --envelopes 600000 --rounds 6 --grain-s 20

A "day" is ``--grain-s`` seconds here (``retention.partition_grain_s``), and every retention
is a few grains, so partitions are created and dropped during the run. The proportions are the
defaults': a dedupe generation is half the dedupe horizon (4 of 8 days), and the ingestion
records outlive a key by at least a generation. Each round preloads its share of envelopes
(the demo fleet's 10-parameter envelope, as ``bench/ingest.py``) into the TELEMETRY stream and
runs ``run_consumer`` (metrics off) until they are processed. Maintenance is run by this script
(the same :func:`streams.retention.maintain.maintain_once` the consumer's leader runs, on the
same interval; the consumer's own loop is set to an interval longer than the run), so that it
knows when a round dropped something.

Per round it prints: envelopes/s, Postgres bytes per retained envelope (every partition of the
streaming tables, indexes included, over the ``ingestion_messages`` rows retained), total
bytes, partitions, batch p99, the batch p99 of the batches that overlapped a drop, and the CPU
per 1,000 envelopes of this process's Python threads (the consumer) and chDB threads,
Postgres and nats-server, with the pages Postgres read from outside ``shared_buffers`` and
the buffers its backends wrote out themselves (where a change of throughput went). It writes
``bench/results/soak.json``. Everything lives in a private namespace and Postgres database,
removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import cpu
import orjson
from ingest import (  # bench/ is on sys.path when this runs as a script
    DEVICES,
    PG_ADMIN,
    REDIS_URL,
    TABLE_BYTES,
    TENANT,
    _cleanup,
    _p99,
    _payloads,
    _preload,
    refuse_unsupported_nats,
)
from ingest import NATS_URL as BENCH_NATS

from streams import migrate
from streams.adapters import postgres
from streams.config import ConsumerSettings, RetentionSettings, Settings, StreamSettings
from streams.ingest.consumer import run_consumer
from streams.ingest.provision import provision
from streams.ingest.simulate import ensure_fleet
from streams.names import Names
from streams.observability.events import IngestBatchStats
from streams.retention import maintain
from streams.retention.plan import DROP

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "soak.json"
TABLES = (
    "ingestion_messages",
    "ingest_dedupe_keys",
    "ingestion_stage_passes",
    "device_telemetry_logs",
    "dead_letters",
)
PARTITIONS = """
SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname = ANY($1::text[])
"""


def _settings(args: argparse.Namespace, dsn: str, names: Names, workdir: Path) -> Settings:
    grain = args.grain_s
    return Settings(
        nats_url=BENCH_NATS,
        postgres_dsn=dsn,
        redis_url=REDIS_URL,
        clickhouse_dsn=f"chdb://{workdir / 'chdb'}",
        clickhouse_database="soak",
        namespace=names.namespace,
        data_dir=workdir,
        consumer=ConsumerSettings(),
        stream=StreamSettings(
            max_age_s=args.max_age_grains * grain,
            duplicate_window_s=min(120.0, args.max_age_grains * grain / 2),
        ),
        retention=RetentionSettings(
            partition_grain_s=grain,
            partitions_ahead=2,
            stage_logs_s=args.stage_logs_grains * grain,
            ingestion_records_s=args.records_grains * grain,
            telemetry_logs_s=args.telemetry_grains * grain,
            dedupe_keys_s=args.max_age_grains * grain,
            dedupe_generation_s=args.generation_grains * grain,
            resolved_dead_letters_s=args.records_grains * grain,
            maintenance_interval_s=10 * 24 * 3600.0,  # this script runs the rounds
        ),
    )


async def _maintainer(
    settings: Settings, stop: asyncio.Event, drops: list[tuple[float, float, list[str]]]
) -> None:
    """Maintenance every grain/4; notes the (start, end, targets) of rounds that dropped."""
    pool = await postgres.create_pool(settings.postgres(), postgres.streaming_pool(1))
    try:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                done = await maintain.maintain_once(pool, settings)
            except Exception as exc:  # as the consumer's loop does: log, try next time
                print(f"maintenance round failed: {exc}", flush=True)
                done = None
            if done is not None:
                dropped = [i.target for i in done.done if i.action == DROP]
                if dropped:
                    drops.append((started, time.perf_counter(), dropped))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.retention.partition_grain_s / 4)
    finally:
        await pool.close()


# Postgres pages this database read from outside shared_buffers, and buffers every backend
# had to write out itself to make room: both grow once the working set outgrows the cache.
PAGES = """
SELECT (SELECT blks_read FROM pg_stat_database WHERE datname = current_database()) AS reads,
       (SELECT buffers_backend FROM pg_stat_bgwriter) AS backend_writes
"""


async def _pages(conn: Any) -> tuple[int, int]:
    row = await conn.fetchrow(PAGES)
    return int(row["reads"]), int(row["backend_writes"])


async def _size(conn: Any) -> tuple[int, int, int]:
    total = 0
    for table in TABLES:
        total += int(await conn.fetchval(TABLE_BYTES, table))
    retained = int(await conn.fetchval("SELECT count(*) FROM ingestion_messages"))
    partitions = int(await conn.fetchval(PARTITIONS, list(TABLES)))
    return total, retained, partitions


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    names = Names(namespace=f"soak{tag}")
    database = f"tw_soak_{tag}"
    workdir = Path(tempfile.mkdtemp(prefix="tideway-soak-"))
    per_round = args.envelopes // args.rounds
    rounds: list[dict[str, Any]] = []
    drops: list[tuple[float, float, list[str]]] = []
    try:
        dsn = await postgres.create_database(PG_ADMIN, database)
        await asyncio.to_thread(migrate.upgrade, dsn)
        settings = _settings(args, dsn, names, workdir)
        refuse_unsupported_nats(await provision(settings))
        await ensure_fleet(settings, tenant=TENANT, devices=DEVICES)
        stop_maint = asyncio.Event()
        maintainer = asyncio.create_task(_maintainer(settings, stop_maint, drops))
        conn = await postgres.connect(dsn)
        try:
            for number in range(args.rounds):
                data = _payloads(per_round, 1000 + number, int(time.time() * 1000))
                await _preload(names, data)
                batches: list[tuple[float, float]] = []  # (end, duration) per batch
                stop = asyncio.Event()
                done = [0]

                def on_batch(
                    stats: IngestBatchStats,
                    done: list[int] = done,
                    batches: list[tuple[float, float]] = batches,
                    stop: asyncio.Event = stop,
                ) -> None:
                    batches.append((time.perf_counter(), stats.duration_s))
                    done[0] += stats.size
                    if done[0] >= per_round:
                        stop.set()

                pages_before = await _pages(conn)
                cpu_before = cpu.by_component()
                started = time.perf_counter()
                task = asyncio.create_task(run_consumer(settings, stop=stop, on_batch=on_batch))
                await asyncio.wait_for(stop.wait(), 3600)
                elapsed = time.perf_counter() - started
                spent = cpu.ms_per_1000(cpu_before, cpu.by_component(), done[0])  # backends up
                pages_after = await _pages(conn)
                await task
                total, retained, partitions = await _size(conn)
                durations = sorted(d for _, d in batches)
                during = sorted(
                    d for end, d in batches if any(a <= end and end - d <= b for a, b, _ in drops)
                )
                row = {
                    "round": number + 1,
                    "envelopes": done[0],
                    "seconds": elapsed,
                    "envelopes_per_s": done[0] / elapsed,
                    "total_bytes": total,
                    "retained_envelopes": retained,
                    "bytes_per_envelope": total / retained if retained else None,
                    "partitions": partitions,
                    "batch_p99_ms": 1000 * _p99(durations),
                    "batches_during_drop": len(during),
                    "batch_p99_during_drop_ms": 1000 * _p99(during) if during else None,
                    "dropped_so_far": sum(len(t) for _, _, t in drops),
                    "cpu_ms_per_1000": spent,
                    "pg_pages_read_per_1000": 1000 * (pages_after[0] - pages_before[0]) / done[0],
                    "pg_backend_writes_per_1000": (
                        1000 * (pages_after[1] - pages_before[1]) / done[0]
                    ),
                }
                rounds.append(row)
                _print_row(row)
        finally:
            stop_maint.set()
            await maintainer
            await conn.close()
    finally:
        await _cleanup(names, database)
        shutil.rmtree(workdir, ignore_errors=True)
    first, last = rounds[0], rounds[-1]
    return {
        "rounds": rounds,
        "throughput_last_to_first": last["envelopes_per_s"] / first["envelopes_per_s"],
        # The same with each end the median of three rounds: one round's rate swings by
        # 10-15 % on a shared machine.
        "throughput_last3_to_first3": (
            statistics.median(r["envelopes_per_s"] for r in rounds[-3:])
            / statistics.median(r["envelopes_per_s"] for r in rounds[:3])
        ),
        "drops": [{"targets": t, "seconds": b - a} for a, b, t in drops],
        "settings": {
            "envelopes": args.envelopes,
            "rounds": args.rounds,
            "grain_s": args.grain_s,
            "stage_logs_grains": args.stage_logs_grains,
            "records_grains": args.records_grains,
            "telemetry_grains": args.telemetry_grains,
            "dedupe_and_max_age_grains": args.max_age_grains,
            "dedupe_generation_grains": args.generation_grains,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_after": os.getloadavg(),
        },
    }


def _print_row(row: dict[str, Any]) -> None:
    during = row["batch_p99_during_drop_ms"]
    print(
        f"round {row['round']:>3}: {row['envelopes_per_s']:>8,.0f} env/s  "
        f"{row['bytes_per_envelope'] or 0:>6,.0f} B/env  {row['total_bytes']:>14,} B  "
        f"{row['partitions']:>4} partitions  batch p99 {row['batch_p99_ms']:>7.1f} ms  "
        f"during drop {'-' if during is None else f'{during:.1f} ms'} "
        f"({row['batches_during_drop']} batches)  CPU ms/1000 "
        + " ".join(f"{c} {ms:.0f}" for c, ms in row["cpu_ms_per_1000"].items())
        + f"  pages read/1000 {row['pg_pages_read_per_1000']:.0f}"
        + f" backend writes/1000 {row['pg_backend_writes_per_1000']:.0f}",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envelopes", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--grain-s", type=float, default=60.0, help="seconds of one partition (a 'day' of this run)"
    )
    parser.add_argument("--stage-logs-grains", type=float, default=2)
    parser.add_argument("--records-grains", type=float, default=9)
    parser.add_argument("--telemetry-grains", type=float, default=8)
    parser.add_argument(
        "--max-age-grains",
        type=float,
        default=6,
        help="TELEMETRY max_age, and the dedupe horizon (its minimum)",
    )
    parser.add_argument(
        "--generation-grains",
        type=float,
        default=3,
        help="one dedupe generation (max-age + generation <= records)",
    )
    arguments = parser.parse_args()
    if arguments.max_age_grains + arguments.generation_grains > arguments.records_grains:
        # The settings would refuse it (a key must not outlive its row): say so in flags,
        # before anything is created.
        parser.error(
            "--max-age-grains + --generation-grains must not exceed --records-grains "
            f"({arguments.max_age_grains:g} + {arguments.generation_grains:g} > "
            f"{arguments.records_grains:g})"
        )
    results = asyncio.run(main(arguments))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"last round / first round throughput: {results['throughput_last_to_first']:.2f}")
    print(
        "median of the last three / of the first three rounds: "
        f"{results['throughput_last3_to_first3']:.2f}"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")
