"""The sampled gauges: job queue depth and heartbeat ages from Postgres, pending from JetStream."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import nats
from nats.js.api import ConsumerConfig, StreamConfig
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.names import Names
from streams.observability.metrics import Metrics
from streams.observability.samplers import (
    HEARTBEAT_AGE_SQL,
    QUEUE_DEPTH_SQL,
    ConsumerSampler,
    JobQueueSampler,
    run_samplers,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _gauge(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    }


async def _run(conn: asyncpg.Connection) -> tuple[uuid.UUID, uuid.UUID]:
    tenant = await conn.fetchval("INSERT INTO tenants (name) VALUES ('acme') RETURNING id")
    device = await conn.fetchval(
        "INSERT INTO devices (tenant_id, external_id) VALUES ($1, 'car-7') RETURNING id", tenant)
    session = await conn.fetchval(
        "INSERT INTO sessions (tenant_id, device_id) VALUES ($1, $2) RETURNING id",
        tenant, device)
    run = await conn.fetchval(
        "INSERT INTO processing_runs (tenant_id, session_id, artifact_set_hash, parser_version,"
        " pipeline_version) VALUES ($1, $2, 'h', 'p1', 'pl1') RETURNING id", tenant, session)
    return tenant, run


async def _job(
    conn: asyncpg.Connection, tenant: uuid.UUID, run: uuid.UUID, job_type: str, state: str,
    *, worker: str | None = None, heartbeat: datetime | None = None,
) -> None:
    locked = state in ("running", "cancel_requested")
    await conn.execute(
        "INSERT INTO jobs (run_id, tenant_id, name, job_type, state, pool, critical,"
        " max_attempts, soft_timeout_s, hard_timeout_s, next_run_at, locked_by, locked_at,"
        " heartbeat_at, skip_reason)"
        " VALUES ($1, $2, $3, $4, $5, 'default', true, 3, 60, 120, $6, $7, $8, $9, $10)",
        run, tenant, f"{job_type}-{uuid.uuid4().hex[:6]}", job_type, state,
        NOW if state == "retry_wait" else None,
        worker if locked else None, NOW - timedelta(hours=1) if locked else None,
        heartbeat, "test" if state == "skipped" else None,
    )


async def test_queue_depth_and_heartbeat_ages_come_from_two_cheap_queries(
    pg_pool: asyncpg.Pool,
) -> None:
    async with pg_pool.acquire() as conn:
        tenant, run = await _run(conn)
        for job_type, state in [
            ("parse", "queued"), ("parse", "queued"), ("parse", "retry_wait"),
            ("fuse", "queued"), ("align", "created"), ("align", "succeeded"),
            ("laps", "failed"), ("metrics", "skipped"),
        ]:
            await _job(conn, tenant, run, job_type, state)
        await _job(conn, tenant, run, "fuse", "running", worker="w-1",
                   heartbeat=NOW - timedelta(seconds=4))
        await _job(conn, tenant, run, "parse", "running", worker="w-1",
                   heartbeat=NOW - timedelta(seconds=9))
        await _job(conn, tenant, run, "laps", "cancel_requested", worker="w-2",
                   heartbeat=NOW - timedelta(seconds=700))
        # On a table this small a sequential scan is cheapest; forbid it to see whether the
        # partial indexes can answer the queries at all (they must: the table keeps history).
        await conn.execute("SET enable_seqscan = off")
        plans = ["\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
                 for sql, args in ((QUEUE_DEPTH_SQL, ()), (HEARTBEAT_AGE_SQL, (NOW,)))]
        await conn.execute("RESET enable_seqscan")

    metrics = Metrics(process=False)
    sampler = JobQueueSampler(metrics, pg_pool, now=lambda: NOW)
    await sampler()

    labels = ("job_type", "state")
    depth = {tuple(dict(k)[n] for n in labels): v
             for k, v in _gauge(metrics, "tideway_job_queue_depth").items()}
    assert depth == {
        ("parse", "queued"): 2, ("parse", "retry_wait"): 1, ("fuse", "queued"): 1,
        ("fuse", "running"): 1, ("parse", "running"): 1, ("laps", "cancel_requested"): 1,
    }  # created and finished jobs are not queue depth
    ages = _gauge(metrics, "tideway_worker_heartbeat_age_seconds")
    assert ages == {(("worker_id", "w-1"),): 9.0, (("worker_id", "w-2"),): 700.0}
    depth_plan, age_plan = plans
    for index in ("ix_jobs_claim", "ix_jobs_retry", "ix_jobs_active"):
        assert index in depth_plan, depth_plan
    assert "Seq Scan" not in depth_plan, depth_plan
    assert "ix_jobs_active" in age_plan and "Seq Scan" not in age_plan, age_plan

    # Work moves on: the queue drains and w-2's job is gone.
    async with pg_pool.acquire() as conn:
        await conn.execute("DELETE FROM jobs WHERE state IN ('queued', 'cancel_requested')")
    await sampler()
    depth = {tuple(dict(k)[n] for n in labels): v
             for k, v in _gauge(metrics, "tideway_job_queue_depth").items()}
    assert depth[("parse", "queued")] == 0 and depth[("fuse", "queued")] == 0  # 0, not gone
    assert _gauge(metrics, "tideway_worker_heartbeat_age_seconds") == {
        (("worker_id", "w-1"),): 9.0
    }


async def test_consumer_pending_is_sampled_from_jetstream(
    nats_url: str, names: Names
) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        stream, durable = names.telemetry_stream, names.ingest_durable
        await js.add_stream(StreamConfig(name=stream, subjects=[names.telemetry_subjects]))
        await js.add_consumer(stream, ConsumerConfig(durable_name=durable))
        for seq in range(5):
            await js.publish(names.telemetry_subject("acme", "d1", "state"), b"{}",
                             headers={"Nats-Msg-Id": f"m-{seq}"})
        sub = await js.pull_subscribe_bind(durable, stream)
        await sub.fetch(2, timeout=5)  # two delivered and not acked

        metrics = Metrics(process=False)
        stop = asyncio.Event()
        task = asyncio.create_task(run_samplers(
            [ConsumerSampler(metrics, js, stream=stream, durable=durable)],
            interval_s=0.05, stop=stop))
        await asyncio.sleep(0.2)
        stop.set()
        await task
    finally:
        await nc.close()
    key = (("consumer", durable), ("stream", stream))
    assert _gauge(metrics, "tideway_jetstream_consumer_pending_messages") == {key: 3}
    assert _gauge(metrics, "tideway_jetstream_consumer_ack_pending_messages") == {key: 2}


async def test_a_failing_sampler_does_not_stop_the_others() -> None:
    calls: list[str] = []

    async def broken() -> None:
        calls.append("broken")
        raise ConnectionError("down")

    async def fine() -> None:
        calls.append("fine")

    stop = asyncio.Event()
    task = asyncio.create_task(run_samplers([broken, fine], interval_s=0.02, stop=stop))
    await asyncio.sleep(0.1)
    stop.set()
    await task
    assert calls.count("fine") >= 2 and calls.count("broken") >= 2
