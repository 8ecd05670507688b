"""The console at scale: every page's API calls and every page's render time, with 10,000
devices, 1,000 runs and 100,000 dead letters in the database.

The script makes a fresh database, migrates it, creates the partitions the maintenance loop
would (yesterday's to three days ahead) and fills it with SQL (devices, an hour of envelopes for
each device - the fleet page's window - recorded as the ingest consumer records them: a message
and a telemetry row each, migration 0020; dead letters of twenty signatures; and runs enqueued
with the real session DAG), serves the API in this process, then:

- times each page's API calls (``--repeat`` times each, warm; median and p95);
- opens each page in headless Chromium (Debian's ``chromium`` + ``chromium-driver``, as the
  console test does) and times from navigation until the page's table or graph is drawn.

    .venv/bin/python bench/console.py                       # 10k devices, 1k runs, 100k DLQ
    .venv/bin/python bench/console.py --devices 1000 --runs 100 --dead-letters 10000

Prints a table and writes ``bench/results/console.json``. Postgres comes from
``TIDEWAY_BENCH_POSTGRES_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``),
NATS and Redis from the usual settings (``TIDEWAY_NATS_URL``, ``TIDEWAY_REDIS_URL``; Redis defaults
to the local server).
Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
import nats  # noqa: E402
from aiohttp import web  # noqa: E402

from schemas.device_schema import parse_schema_text  # noqa: E402
from stages.jobs.dag import DEFAULT_DAG  # noqa: E402
from stages.jobs.planner import plan_run  # noqa: E402
from streams import migrate, registry  # noqa: E402
from streams.adapters import postgres  # noqa: E402
from streams.api.context import ApiContext  # noqa: E402
from streams.api.keys import create_api_key  # noqa: E402
from streams.api.server import build_app  # noqa: E402
from streams.config import Settings  # noqa: E402
from streams.embedded import free_port  # noqa: E402
from streams.ingest import sql as ingest_sql  # noqa: E402
from streams.ingest.fleet import TOPIC, demo_schema_text  # noqa: E402
from streams.jobs import queue  # noqa: E402
from streams.jobs.model import RunVersions  # noqa: E402
from streams.objects import ObjectStore  # noqa: E402
from streams.retention import maintain  # noqa: E402

ADMIN_DSN = os.environ.get(
    "TIDEWAY_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
RESULTS = ROOT / "bench" / "results" / "console.json"
TENANT = "bench"
CODES = [f"BENCH_CODE_{i:02d}" for i in range(20)]
STAGES = ["ingress", "validate", "mutate", "derive", "publish"]

# Devices on the demo schema, and an hour of envelopes for each: every 7th device loses one
# seq, every 11th gets one invalid envelope, every 13th a duplicate.
SEED_DEVICES = """
INSERT INTO devices (tenant_id, external_id, name, schema_version_id)
SELECT $1, 'dev-' || lpad(i::text, 5, '0'), 'device ' || i, $3 FROM generate_series(1, $2) i
"""
# A dedupe key's digest as ingestion_messages.source_deduplication_key holds it
# (stages.ingest.ingress.key_hash: the first 128 bits of its SHA-256; migration 0020).
DIGEST = "encode(substring(sha256(convert_to({}, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid"
# The envelopes as the consumer records them (stages/ingest/plan.py, Recording.add): in arrival
# order (ids and stream sequence rise with received_at, so the BRIN indexes on the telemetry
# rows' received_at and message id are as tight as in a deployment), a message row with the
# key's digest and a telemetry row holding the device, measurement and seq, which the message
# row leaves NULL (with tenant, schema version and topic); the subject left out too, as the
# tenant, device and topic spell it under the prefix $2 (migration 0018).
SEED_ENVELOPES = f"""
WITH e AS MATERIALIZED (
  SELECT nextval(pg_get_serial_sequence('ingestion_messages', 'id')) AS id,
         row_number() OVER (ORDER BY received_at, n) AS stream_seq, a.*
  FROM (SELECT d.id AS device_id, d.n, s, d.n % 11 = 0 AND s = 3 AS invalid,
               now() - make_interval(secs => (7 - s) * 500) AS received_at
        FROM (SELECT id, row_number() OVER (ORDER BY external_id) AS n
              FROM devices WHERE tenant_id = $1) d,
             generate_series(1, 6) s
        WHERE NOT (d.n % 7 = 0 AND s = 4)) a
), m AS (
  INSERT INTO ingestion_messages (id, source_deduplication_key, stream_seq, received_at,
      subject_prefix, payload_bytes, status, error_code, error_message)
  SELECT id, {DIGEST.format("'k-' || n || '-' || s")}, stream_seq, received_at, $2, 120,
         (CASE WHEN invalid THEN 'failed_validation' ELSE 'completed' END)::ingestion_status,
         CASE WHEN invalid THEN 'VALIDATION_FAILED' END,
         CASE WHEN invalid THEN 'temp_c: below its minimum' END
  FROM e
)
INSERT INTO device_telemetry_logs (ingestion_message_id, device_id, measured_at, seq,
    received_at, processing_state, values_layout, parameter_list, validation_issues)
SELECT id, device_id, received_at - interval '0.2 s', s, received_at,
       (CASE WHEN invalid THEN 'invalid' ELSE 'processed' END)::telemetry_processing_state,
       $3, $4::json,
       CASE WHEN invalid THEN jsonb_build_array(jsonb_build_object(
           'parameter', 'temp_c', 'code', 'VALIDATION_FAILED',
           'message', 'temp_c: below its minimum', 'critical', true)) END
FROM e ORDER BY id
"""
# Duplicates keep their tenant, device, measurement and seq (they have no telemetry row).
SEED_DUPLICATES = """
INSERT INTO ingestion_messages (duplicate_of, stream_seq, received_at, subject, payload_bytes,
    tenant_id, device_id, measured_at, seq, status)
SELECT m.id, m.stream_seq + 1000000000, m.received_at + interval '1 second',
       'telemetry.bench.' || d.external_id || '.state', 120,
       d.tenant_id, t.device_id, t.measured_at, t.seq, 'duplicate'
FROM device_telemetry_logs t
JOIN devices d ON d.id = t.device_id
JOIN ingestion_messages m ON m.id = t.ingestion_message_id AND m.received_at = t.received_at
WHERE d.tenant_id = $1 AND t.seq = 2 AND right(d.external_id, 5)::int % 13 = 0
ORDER BY t.received_at, t.ingestion_message_id
"""
# The names of a telemetry row's values: the topic's parameters in schema order.
LAYOUT_NAMES = """
SELECT array_agg(p.name ORDER BY p.position)
FROM schema_parameters p JOIN schema_topics t ON t.id = p.topic_id
WHERE t.schema_version_id = $1 AND t.name = $2
"""
# Dead letters: malformed envelopes (no tenant row), 20 codes x 5 stages of signatures; the
# dead letter keeps the key's text (a redrive republishes under it), the message its digest.
SEED_DEAD_LETTERS = f"""
WITH m AS (
  INSERT INTO ingestion_messages (source_deduplication_key, stream_seq, received_at, subject,
      payload_bytes, status, error_code)
  SELECT {DIGEST.format("'dl-' || i")}, 2000000000 + i, now() - make_interval(secs => i % 86400),
         'telemetry.bench.dev-' || lpad((i % 10000)::text, 5, '0') || '.state', 40,
         'failed_terminal', ($3::text[])[1 + i % 20]
  FROM generate_series(1, $2) i
  RETURNING id, subject, error_code, stream_seq
)
INSERT INTO dead_letters (ingestion_message_id, tenant, subject, payload, reason_code, failures,
    dedupe_key)
SELECT id, $1, subject, convert_to('{{"ts": "not a time", "n": ' || stream_seq || '}}', 'UTF8'),
       error_code,
       jsonb_build_array(jsonb_build_object('stage', ($4::text[])[1 + (stream_seq % 5)::int],
                                            'code', error_code)),
       'dl-' || (stream_seq - 2000000000)
FROM m
"""


async def seed(dsn: str, *, devices: int, runs: int, dead_letters: int) -> dict[str, Any]:
    conn = await postgres.connect(dsn)
    try:
        # The partitions the maintenance loop keeps: today's and the coming days', and
        # yesterday's (the dead letters go back a day), so the console's statements prune
        # partitions as in a deployment.
        settings = Settings(postgres_dsn=dsn)
        now = dt.datetime.now(dt.UTC)
        for at in (now - dt.timedelta(seconds=settings.retention.partition_grain_s), now):
            await maintain.ensure_ahead(conn, settings, at)
        text = demo_schema_text(TENANT)
        schema = await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
        tenant = await conn.fetchval("SELECT id FROM tenants WHERE name = $1", TENANT)
        await conn.execute(SEED_DEVICES, tenant, devices, schema.version_id)
        names = await conn.fetchval(LAYOUT_NAMES, schema.version_id, TOPIC)
        layout = await conn.fetchval(ingest_sql.REGISTER_LAYOUT, str(schema.version_id), TOPIC,
                                     names)  # fmt: skip
        prefix = await conn.fetchval(ingest_sql.REGISTER_SUBJECT_PREFIX, "")
        values = json.dumps([20.0 + i for i in range(len(names))])
        await conn.execute(SEED_ENVELOPES, tenant, prefix, layout, values)
        await conn.execute(SEED_DUPLICATES, tenant)
        await conn.execute(SEED_DEAD_LETTERS, TENANT, dead_letters, CODES, STAGES)
        device = await conn.fetchval("SELECT id FROM devices ORDER BY external_id LIMIT 1")
        plan = plan_run()  # the session DAG
        run_ids = []
        for _ in range(runs):
            session = await conn.fetchval(
                "INSERT INTO sessions (tenant_id, device_id) VALUES ($1, $2) RETURNING id",
                tenant, device,
            )  # fmt: skip
            created = await queue.enqueue_run(
                conn, tenant_id=tenant, session_id=session, plan=plan, config={},
                versions=RunVersions(parser="b", pipeline="b"), artifact_ids=[],
                artifact_set_hash=uuid.uuid4().hex * 2, channel="bench_unused",
                dag=DEFAULT_DAG,
            )  # fmt: skip
            run_ids.append(created)
        await conn.execute("ANALYZE")
        key = await create_api_key(conn, tenant=TENANT, name="bench")
        counts = {
            table: await conn.fetchval(f"SELECT count(*) FROM {table}")
            for table in (
                "devices",
                "processing_runs",
                "jobs",
                "dead_letters",
                "ingestion_messages",
                "device_telemetry_logs",
            )
        }
        return {"key": key.secret, "counts": counts}
    finally:
        await conn.close()


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(p95 * 1000, 1),
    }


async def time_calls(
    base: str, key: str, repeat: int
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(base, headers=headers) as http:

        async def get(path: str) -> Any:
            async with http.get(path) as resp:
                assert resp.status == 200, (path, resp.status, await resp.text())
                return await resp.json()

        run = (await get("/v1/runs?limit=1"))["items"][0]["id"]
        group = (await get("/v1/dead-letter-groups?state=open&limit=200"))["items"][0]["id"]
        session = (await get("/v1/sessions?limit=1"))["items"][0]["id"]
        device = (await get("/v1/devices?limit=1"))["items"][0]["external_id"]
        pages = {
            "fleet": ["/v1/fleet?sort=seq_gaps&order=desc&limit=200", "/v1/fleet/live",
                      "/v1/fleet/history?range=1h", "/v1/fleet/history?range=24h"],
            "runs": ["/v1/runs?limit=50"],
            "run": [f"/v1/runs/{run}", f"/v1/runs/{run}/dag"],
            "dead letters": ["/v1/dead-letter-groups?state=open&limit=200"],
            "dead-letter group": [f"/v1/dead-letters?state=open&group={group}&limit=200"],
            "sessions": ["/v1/sessions?limit=100"],
            "session": [f"/v1/sessions/{session}", f"/v1/sessions/{session}/track",
                        f"/v1/runs/{run}"],
            "devices": ["/v1/devices?limit=200"],
            "device": [f"/v1/devices/{device}", f"/v1/sessions?device={device}&limit=50",
                       f"/v1/devices/{device}/activity"],
        }  # fmt: skip
        rows = []
        for page, paths in pages.items():
            for path in paths:
                await get(path)  # warm
                samples = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    await get(path)
                    samples.append(time.perf_counter() - started)
                call = path.split("?")[0].replace(run, "{id}").replace(session, "{id}")
                call = call.replace(f"/{device}", "/{device}")
                rows.append({"page": page, "call": call, **_stats(samples)})
        ready = {
            "fleet": ("#/fleet", "#fleet-rows tr"),
            "runs": ("#/runs", "#runs-rows tr"),
            "run": (f"#/runs/{run}", "#dag-svg .dag-node"),
            "dead letters": ("#/dead-letters", "#dlq-rows tr[data-group]"),
            "dead-letter group": (f"#/dead-letters/open/{group}", "#dlq-letters tbody tr"),
            "sessions": ("#/sessions", "#sessions-rows tr"),
            "session": (f"#/sessions/{session}", "#session-runs"),
            "devices": ("#/devices", "#devices-rows tr"),
            "device": (f"#/devices/{device}", "#device-messages"),
        }
    return rows, {k: f"{h}|{sel}" for k, (h, sel) in ready.items()}


def time_renders(base: str, key: str, ready: dict[str, str], repeat: int) -> list[dict[str, Any]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=str(shutil.which("chromedriver")))
    )
    try:
        wait = WebDriverWait(driver, 30, poll_frequency=0.005)
        driver.get(base)
        wait.until(lambda d: d.find_element(By.ID, "api-key").is_displayed())
        driver.find_element(By.ID, "api-key").send_keys(key)
        driver.find_element(By.CSS_SELECTOR, "#sign-in button[type=submit]").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-rows tr"))
        rows = []
        for page, spec in ready.items():
            hash_, selector = spec.split("|")
            samples = []
            for _ in range(repeat + 1):
                driver.execute_script("location.hash = '#/nowhere'")
                wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#view table, #view svg"))
                started = time.perf_counter()
                driver.execute_script("location.hash = arguments[0]", hash_)
                wait.until(lambda d, s=selector: d.find_elements(By.CSS_SELECTOR, f"#view {s}"))
                samples.append(time.perf_counter() - started)
            rows.append({"page": page, **_stats(samples[1:])})  # the first one warms caches
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        return rows
    finally:
        driver.quit()


@contextlib.asynccontextmanager
async def _serving(settings: Settings, login: str, tenant_bound: bool, nc: Any
                   ) -> AsyncIterator[str]:
    """The API on a free port with a pool of ``login``; yields its base URL."""
    pool = await postgres.create_pool(login, postgres.API_POOL)
    ctx = ApiContext(settings=settings, pool=pool, store=ObjectStore(settings.objects()),
                     nats=nc, tenant_bound=tenant_bound)
    runner = web.AppRunner(build_app(ctx), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()
        await pool.close()


def _side_by_side(samples: dict[str, list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One row per call with each variant's median and p95 over its rounds (the median of
    the rounds' medians, the largest p95)."""
    rows: list[dict[str, Any]] = []
    first = next(iter(samples.values()))[0]
    for i, call in enumerate(first):
        row = {"page": call["page"], "call": call["call"], "variants": {}}
        for variant, rounds in samples.items():
            row["variants"][variant] = {
                "median_ms": round(statistics.median(r[i]["median_ms"] for r in rounds), 1),
                "p95_ms": round(max(r[i]["p95_ms"] for r in rounds), 1),
            }
        rows.append(row)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--dead-letters", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per API route")
    parser.add_argument("--renders", type=int, default=5, help="timed renders per page")
    parser.add_argument("--rounds", type=int, default=2,
                        help="interleaved rounds of the three API variants")
    args = parser.parse_args()

    name = f"tw_bench_console_{uuid.uuid4().hex[:6]}"
    dsn = await postgres.create_database(ADMIN_DSN, name)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        started = time.perf_counter()
        seeded = await seed(dsn, devices=args.devices, runs=args.runs,
                            dead_letters=args.dead_letters)  # fmt: skip
        seed_s = time.perf_counter() - started
        # The device page reads hot state from Redis: the local server unless one is named
        # (without any, that call answers 422 CONFIG_ERROR and the timing stops).
        settings = Settings(
            postgres_dsn=dsn, namespace=f"bench{uuid.uuid4().hex[:6]}",
            redis_url=os.environ.get("TIDEWAY_REDIS_URL", "redis://127.0.0.1:6379/0"),
        )  # fmt: skip
        # The API as before row-level security (one login, statements untouched), with the
        # tenant bound to each statement (a transaction and set_config each), and as the
        # tideway_api role, whose policies then filter every row - interleaved, so the
        # machine's drift falls on all three alike (migration 0023, streams.api.tenant_db).
        variants = {
            "before": (dsn, False),
            "tenant bound": (dsn, True),
            "api role + RLS": (f"{dsn}?role=tideway_api", True),
        }
        samples: dict[str, list[list[dict[str, Any]]]] = {v: [] for v in variants}
        ready: dict[str, str] = {}
        nc = await nats.connect(settings.nats())
        try:
            for _ in range(args.rounds):
                for variant, (login, bound) in variants.items():
                    async with _serving(settings, login, bound, nc) as base:
                        calls, ready = await time_calls(base, seeded["key"], args.repeat)
                        samples[variant].append(calls)
            if args.renders:
                async with _serving(settings, f"{dsn}?role=tideway_api", True, nc) as base:
                    renders = await asyncio.to_thread(
                        time_renders, base, seeded["key"], ready, args.renders)
            else:
                renders = []
        finally:
            await nc.close()
        calls = _side_by_side(samples)
    finally:
        await postgres.drop_database(ADMIN_DSN, name)

    print(f"seeded in {seed_s:.1f} s: {seeded['counts']}")
    names = list(calls[0]["variants"]) if calls else []
    print(f"\n{'page':<18} {'API call':<38} " + " ".join(f"{n + ' med/p95 ms':>26}"
                                                        for n in names))
    for r in calls:
        cells = " ".join(f"{v['median_ms']:>16} / {v['p95_ms']:>7}"
                         for v in r["variants"].values())
        print(f"{r['page']:<18} {r['call']:<38} {cells}")
    worst = {n: max(r["variants"][n]["p95_ms"] for r in calls) for n in names}
    print("\nslowest call's p95 (ms): " + ", ".join(f"{n} {w}" for n, w in worst.items()))
    print(f"\n{'page':<18} {'render median ms':>17} {'p95 ms':>8}")
    for r in renders:
        print(f"{r['page']:<18} {r['median_ms']:>17} {r['p95_ms']:>8}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "args": vars(args), "seed_s": round(seed_s, 1), "counts": seeded["counts"],
        "api_calls": calls, "renders": renders,
    }, indent=2) + "\n")  # fmt: skip
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
