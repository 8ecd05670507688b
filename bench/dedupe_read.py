"""The dedupe read against 1, 3 and 9 kept dedupe generations: what ``dedupe_generation_s`` buys.

Run:  .venv/bin/python bench/dedupe_read.py                       # 600,000 keys a generation
      .venv/bin/python bench/dedupe_read.py --keys-per-generation 2000000 --reads 50

A dedupe read (``streams.ingest.sql.LOOKUP``) probes every kept generation of
``ingest_dedupe_keys`` once per key: a key can be in any of them. This fills 9 generations with
random digests in a private database (migrated to head; nothing else in it), then times the
read of a batch of keys that are new (the common case: every generation is probed) and of
keys held by the oldest generation, with 9 generations kept, then 3 (the default: 8-day
horizon, 4-day generations), then 1 (the older ones dropped, as retention does), each time
with the next generation's empty partition beside them, as the maintenance round keeps it.
Prints a table and writes ``bench/results/dedupe_read.json``. The database is dropped at the
end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from ingest import PG_ADMIN  # bench/ is on sys.path when this runs as a script

from streams import migrate
from streams.adapters import postgres
from streams.config import Settings
from streams.ingest import sql
from streams.retention import maintain
from streams.retention.plan import DEDUPE, DROP, PlanItem

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "dedupe_read.json"
KEPT = (9, 3, 1)

# A generation's keys, as the recording transaction's COPY writes them; message ids and times
# are placeholders (the read of a new key never reaches a message row).
FILL = """
INSERT INTO ingest_dedupe_keys (key_hash, gen, message_id, received_at)
SELECT gen_random_uuid(), $1, g, now() FROM generate_series($2::bigint, $3::bigint) g
"""


async def _generations(conn: Any, count: int, per_generation: int) -> None:
    """``count`` generations of ``per_generation`` keys each, begun and partitioned by the
    maintenance round's own steps (so the next generation's empty partition exists too, as
    in a deployment)."""
    for n in range(count):
        if n:
            await maintain.start_generation(conn, datetime.now(UTC))
        await maintain.ensure_generations(conn)
        gen = int(await conn.fetchval(sql.CURRENT_GENERATION))
        for lo in range(n * per_generation, (n + 1) * per_generation, 200_000):
            hi = min(lo + 200_000, (n + 1) * per_generation) - 1
            await conn.execute(FILL, gen, lo, hi)
        print(f"generation {gen}: {per_generation:,} keys", flush=True)
    await conn.execute("CHECKPOINT")


async def _drop_generation(conn: Any, gen: int) -> None:
    """Forget generation ``gen`` as a retention run does (a ``drop`` item of its plan)."""
    now = datetime.now(UTC)
    item = PlanItem(tier=DEDUPE.name, target=f"{DEDUPE.table}_g{gen}", expires_at=now,
                    action=DROP, bytes=0)
    done, skipped = await maintain.execute(conn, Settings(), [item], now)
    assert done == [item] and not skipped, skipped


async def _time_reads(conn: Any, digests: list[list[str]]) -> list[float]:
    out = []
    for batch in digests:
        started = time.perf_counter()
        rows = await conn.fetch(sql.LOOKUP, "\n".join(batch), "")
        out.append(time.perf_counter() - started)
        assert rows[0]["id"] is None  # the generation row
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    database = f"tw_dedupe_read_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(PG_ADMIN, database)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        conn = await postgres.connect(dsn)
        try:
            await _generations(conn, max(KEPT), args.keys_per_generation)
            rows = []
            for kept in KEPT:
                gens = [r["gen"] for r in await conn.fetch(
                    "SELECT gen FROM ingest_dedupe_generations ORDER BY gen")]
                for gen in gens[: len(gens) - kept]:  # retention drops the oldest
                    await _drop_generation(conn, gen)
                oldest = gens[len(gens) - kept]
                held = [
                    [str(r["key_hash"]) for r in await conn.fetch(
                        f"SELECT key_hash FROM ingest_dedupe_keys_g{oldest} "
                        "TABLESAMPLE SYSTEM (1) LIMIT $1", args.batch)]
                    for _ in range(args.reads)
                ]
                new = [[str(uuid.uuid4()) for _ in range(args.batch)] for _ in range(args.reads)]
                await _time_reads(conn, new[:3])  # warm the plan cache and the index roots
                for case, batches in (("new keys", new), ("keys of the oldest", held)):
                    times = await _time_reads(conn, batches)
                    row = {
                        "generations_kept": kept,
                        "case": case,
                        "batch": args.batch,
                        "median_ms": 1000 * statistics.median(times),
                        "p95_ms": 1000 * sorted(times)[int(0.95 * (len(times) - 1))],
                        "us_per_key": 1e6 * statistics.median(times) / args.batch,
                    }
                    rows.append(row)
                    print(
                        f"{kept:>2} generations  {case:<18} {row['median_ms']:>8.2f} ms median "
                        f"{row['p95_ms']:>8.2f} ms p95  {row['us_per_key']:>6.1f} µs/key",
                        flush=True,
                    )
        finally:
            await conn.close()
    finally:
        await postgres.drop_database(PG_ADMIN, database)
    return {
        "rows": rows,
        "settings": {"keys_per_generation": args.keys_per_generation, "batch": args.batch,
                     "reads": args.reads},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_after": os.getloadavg()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys-per-generation", type=int, default=600_000)
    parser.add_argument("--batch", type=int, default=500, help="keys per read (a batch)")
    parser.add_argument("--reads", type=int, default=30, help="timed reads per case")
    results = asyncio.run(main(parser.parse_args()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"wrote {RESULTS.relative_to(ROOT)}")
