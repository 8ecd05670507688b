"""Benchmark of change safety (issue 31): a schema trial and a re-derive beside the pipeline.

Run:  TIDEWAY_BENCH_NATS_URL=nats://127.0.0.1:4322 .venv/bin/python bench/change_safety.py
      [--envelopes 100000] [--repeat 1]

On the demo fleet (1,000 weather stations; ``bench/ingest.py``'s data) it measures, in one run:

* **full** — ``run_consumer`` over a backlog of N envelopes (``bench/ingest.py``'s full mode,
  metrics off): the pipeline's own rate on this machine now;
* **trial** — ``tideway schema test``'s core (:func:`streams.ingest.schema_trial.try_on_traffic`)
  of a candidate version (``temp_f``'s expression changed, so every envelope's values differ)
  on those N recorded envelopes, across the fleet (``schema apply --check-last``'s scope):
  reading them back from JetStream, evaluating each, comparing with Postgres;
* **reprocess** — ``tideway replay --reprocess`` of the same window after the candidate is
  applied and assigned: every envelope re-derived and corrected (analytics rows, hot state,
  telemetry rows and their kept corrections).

Each as envelopes/s and as a share of the full pipeline's rate. Prints a table and writes
``bench/results/change_safety.json``. Everything lives in a private namespace, Postgres
database and chDB directory, removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import ingest  # bench/ is on sys.path when this runs as a script

from schemas.device_schema import parse_schema_text
from stages.ingest.program import compile_schema
from streams import migrate, registry
from streams.adapters import postgres
from streams.config import Settings
from streams.ingest.fleet import SCHEMA_NAME, demo_schema_text
from streams.ingest.provision import provision
from streams.ingest.replay import replay
from streams.ingest.schema_trial import try_on_traffic
from streams.ingest.simulate import ensure_fleet
from streams.names import Names

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "change_safety.json"
OLD = 'derived: "temp_c * 9 / 5 + 32"}'
NEW = 'derived: "temp_c * 1.8 + 32.5"}'


def candidate(tenant: str) -> str:
    text = demo_schema_text(tenant)
    assert OLD in text
    return text.replace(OLD, NEW)


async def one_round(n: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    names = Names(namespace=f"bench{tag}")
    database = f"tw_bench_{tag}"
    workdir = Path(tempfile.mkdtemp(prefix="tideway-bench-"))
    try:
        dsn = await postgres.create_database(ingest.PG_ADMIN, database)
        await asyncio.to_thread(migrate.upgrade, dsn)
        settings = Settings(
            nats_url=ingest.NATS_URL, postgres_dsn=dsn, redis_url=ingest.REDIS_URL,
            clickhouse_dsn=f"chdb://{workdir / 'chdb'}", clickhouse_database="bench",
            namespace=names.namespace, data_dir=workdir)
        ingest.refuse_unsupported_nats(await provision(settings))
        await ensure_fleet(settings, tenant=ingest.TENANT, devices=ingest.DEVICES)
        since = datetime.now(UTC) - timedelta(seconds=1)
        await ingest._preload(names, ingest._payloads(n, 1, int(time.time() * 1000)))
        print(f"preloaded {n:,} envelopes; measuring…", flush=True)

        full = await ingest.full_pipeline(settings, n, metrics=False)
        print(f"  full       {full['envelopes_per_s']:>10,.0f} envelopes/s", flush=True)

        text = candidate(ingest.TENANT)
        schema = parse_schema_text(text)
        t0, c0 = time.perf_counter(), time.process_time()
        trial = await try_on_traffic(settings, tenant=ingest.TENANT, schema=schema.name,
                                     content_hash=schema.content_hash(),
                                     programs=compile_schema(schema), last=n)
        trial_s, trial_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert trial.tried == n and trial.compared == n, trial.as_dict()
        assert trial.parameters["temp_f"].changed == n
        print(f"  trial      {n / trial_s:>10,.0f} envelopes/s", flush=True)

        conn = await postgres.connect(dsn)
        try:
            await registry.apply_schema(conn, schema, source_text=text)
            await conn.execute(
                "UPDATE devices SET schema_version_id = (SELECT max(v.id::text)::uuid FROM "
                "device_schema_versions v WHERE v.version = 2)")
        finally:
            await conn.close()
        t0, c0 = time.perf_counter(), time.process_time()
        done = await replay(settings, since=since, reprocess=True)
        re_s, re_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert done.reprocess is not None and done.reprocess.corrected == n, done.as_dict()
        print(f"  reprocess  {n / re_s:>10,.0f} envelopes/s", flush=True)
        return {
            "envelopes": n,
            "full_envelopes_per_s": full["envelopes_per_s"],
            "trial_envelopes_per_s": n / trial_s, "trial_cpu_ms_per_1000": 1e6 * trial_cpu / n,
            "reprocess_envelopes_per_s": n / re_s,
            "reprocess_cpu_ms_per_1000": 1e6 * re_cpu / n,
            "trial_to_full": (n / trial_s) / full["envelopes_per_s"],
            "reprocess_to_full": (n / re_s) / full["envelopes_per_s"],
            "schema": SCHEMA_NAME,
        }
    finally:
        await ingest._cleanup(names, database)
        shutil.rmtree(workdir, ignore_errors=True)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    rounds = [await one_round(args.envelopes) for _ in range(args.repeat)]
    return {"rounds": rounds, "load_before": load_before, "load_after": os.getloadavg(),
            "cpus": os.cpu_count(), "python": platform.python_version()}


def _print(results: dict[str, Any]) -> None:
    print("\n| round | full pipeline | schema trial (dry run) | replay --reprocess |")
    print("| ---: | ---: | ---: | ---: |")
    for i, r in enumerate(results["rounds"], 1):
        print(f"| {i} | {r['full_envelopes_per_s']:,.0f}/s | "
              f"{r['trial_envelopes_per_s']:,.0f}/s ({r['trial_to_full']:.2f}×, "
              f"{r['trial_cpu_ms_per_1000']:.1f} CPU ms/1,000) | "
              f"{r['reprocess_envelopes_per_s']:,.0f}/s ({r['reprocess_to_full']:.2f}×, "
              f"{r['reprocess_cpu_ms_per_1000']:.1f} CPU ms/1,000) |")
    print(f"\nload average before/after: {results['load_before']} / {results['load_after']} "
          f"on {results['cpus']} CPUs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    results = asyncio.run(main(parser.parse_args()))
    _print(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
