"""The domain-event relay: its throughput on a backlog, and its lag under a steady offered rate.

Two measures on a fresh database and real NATS JetStream (issue 27):

* **backlog**: ``--backlog`` runs are created in one statement (the outbox triggers write one
  ``run.pending`` each), then one relay drains them; events/s from its first round to the last
  event stamped.
* **live**: runs are created one per transaction at ``--rates`` events/s for ``--seconds``
  while a relay runs as a worker runs it (woken by the outbox's NOTIFY); a core-NATS subscriber
  measures each event's lag from the change's commit-time stamp (the body's ``at``) to its
  arrival. p50 / p99 / max per rate.

    TIDEWAY_BENCH_NATS_URL=nats://127.0.0.1:4322 .venv/bin/python bench/event_relay.py
    .venv/bin/python bench/event_relay.py --backlog 20000 --rates 100,1000 --seconds 10

Prints a table and writes ``bench/results/event_relay.json``. Postgres comes from
``TIDEWAY_BENCH_POSTGRES_DSN`` (default: the local server), NATS (2.10 or newer, with
JetStream) from ``TIDEWAY_BENCH_NATS_URL`` (default ``nats://127.0.0.1:4222``).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from datetime import datetime  # noqa: E402
from typing import Any  # noqa: E402

import nats  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
from bench_pg import ADMIN_DSN, fresh_database  # noqa: E402

from streams import migrate  # noqa: E402
from streams.adapters import postgres  # noqa: E402
from streams.config import EventSettings, Settings, mask_url  # noqa: E402
from streams.domain_events import EventRelay  # noqa: E402
from streams.names import Names  # noqa: E402

NATS_URL = os.environ.get("TIDEWAY_BENCH_NATS_URL", "nats://127.0.0.1:4222")
RESULTS = ROOT / "bench" / "results" / "event_relay.json"

# One run per row: a tenant, a device and a session to hang them on (migration 0003's
# required columns); each insert fires the outbox trigger once.
_SETUP = """
WITH t AS (INSERT INTO tenants (name) VALUES ('bench') RETURNING id),
d AS (INSERT INTO devices (tenant_id, external_id) SELECT id, 'bench' FROM t RETURNING id,
      tenant_id)
INSERT INTO sessions (tenant_id, device_id) SELECT tenant_id, id FROM d RETURNING id, tenant_id
"""
_RUNS = """
INSERT INTO processing_runs (tenant_id, session_id, artifact_set_hash, parser_version,
                             pipeline_version, config, jobs_total, jobs_open)
SELECT $1, $2, repeat('0', 64), 'b', 'b', '{}'::jsonb, 0, 0 FROM generate_series(1, $3)
"""


async def _database() -> tuple[str, str]:
    name, dsn = await fresh_database("relay")
    await asyncio.to_thread(migrate.upgrade, dsn)
    return name, dsn


def _settings(dsn: str, namespace: str) -> Settings:
    return Settings(postgres_dsn=dsn, nats_url=NATS_URL, namespace=namespace,
                    events=EventSettings(relay_poll_s=1.0))


async def backlog_round(events: int) -> dict[str, Any]:
    name, dsn = await _database()
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    settings = _settings(dsn, namespace)
    pool = await postgres.create_pool(dsn, postgres.PoolShape(max_size=2))
    relay = EventRelay(settings, pool)
    try:
        owner = await pool.fetchrow(_SETUP)
        await pool.execute(_RUNS, owner["tenant_id"], owner["id"], events)
        await relay.relay_round()  # connects and provisions the stream: not timed
        await pool.execute("UPDATE event_outbox SET relayed_at = NULL")
        started = time.perf_counter()
        relayed = 0
        while (done := await relay.relay_round()).relayed:
            relayed += done.relayed
        elapsed = time.perf_counter() - started
        assert relayed == events, (relayed, events)
        return {"measure": "backlog", "events": events, "seconds": round(elapsed, 3),
                "events_per_s": round(events / elapsed, 1)}
    finally:
        await _cleanup(relay, settings)
        await pool.close()
        await postgres.drop_database(ADMIN_DSN, name)


async def live_round(rate: int, seconds: float) -> dict[str, Any]:
    name, dsn = await _database()
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    settings = _settings(dsn, namespace)
    pool = await postgres.create_pool(dsn, postgres.PoolShape(max_size=4))
    relay = EventRelay(settings, pool)
    lags: list[float] = []
    total = int(rate * seconds)
    heard_all = asyncio.Event()
    nc = await nats.connect(NATS_URL)

    async def on_event(msg: Any) -> None:
        at = datetime.fromisoformat(orjson.loads(msg.data)["at"]).timestamp()
        lags.append(time.time() - at)
        if len(lags) >= total:
            heard_all.set()

    stop = asyncio.Event()
    try:
        owner = await pool.fetchrow(_SETUP)
        await nc.subscribe(Names(namespace=namespace).events_subjects, cb=on_event)
        await nc.flush()
        task = asyncio.create_task(relay.run(stop))
        started = time.perf_counter()
        for i in range(total):  # one change per transaction, paced to the offered rate
            await pool.execute(_RUNS, owner["tenant_id"], owner["id"], 1)
            ahead = started + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)
        offered = total / (time.perf_counter() - started)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(heard_all.wait(), 30)
        stop.set()
        await task
        assert len(lags) == total, (len(lags), total)
        ms = np.array(lags) * 1000
        return {"measure": "live", "events": total, "offered_per_s": round(offered, 1),
                "lag_p50_ms": round(float(np.percentile(ms, 50)), 2),
                "lag_p99_ms": round(float(np.percentile(ms, 99)), 2),
                "lag_max_ms": round(float(ms.max()), 2)}
    finally:
        stop.set()
        await nc.close()
        await _cleanup(relay, settings)
        await pool.close()
        await postgres.drop_database(ADMIN_DSN, name)


async def _cleanup(relay: EventRelay, settings: Settings) -> None:
    await relay.aclose()
    nc = await nats.connect(NATS_URL)
    try:
        await nc.jetstream().delete_stream(Names(namespace=settings.namespace).events_stream)
    except Exception:  # never made: nothing to remove
        pass
    finally:
        await nc.close()


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'measure':<9}{'events':>8}{'offered/s':>11}{'events/s':>10}"
          f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for r in rows:
        print(f"{r['measure']:<9}{r['events']:>8}{r.get('offered_per_s', ''):>11}"
              f"{r.get('events_per_s', ''):>10}{r.get('lag_p50_ms', ''):>9}"
              f"{r.get('lag_p99_ms', ''):>9}{r.get('lag_max_ms', ''):>9}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    load = os.getloadavg()[0]
    print(f"postgres: {mask_url(ADMIN_DSN)}   nats: {NATS_URL}   load average: {load:.2f}")
    rows = [await backlog_round(args.backlog)]
    print_table(rows[-1:])
    for rate in (int(r) for r in args.rates.split(",")):
        rows.append(await live_round(rate, args.seconds))
        print_table(rows[-1:])
    print()
    print_table(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "domain-event relay: outbox -> EVENTS stream",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": load},
        "postgres": mask_url(ADMIN_DSN), "nats": NATS_URL, "results": rows,
    }, indent=2) + "\n")  # fmt: skip
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
