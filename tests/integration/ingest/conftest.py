"""Fixtures for the streaming pipeline on real NATS, Postgres, Redis and ClickHouse (chdb)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import nats
import orjson
import pytest
import redis.asyncio as aioredis

from schemas.device_schema import parse_schema_text
from streams import registry
from streams.clickhouse import ClickHouse
from streams.config import RetrySettings, Settings
from streams.ingest import sql
from streams.ingest.analytics import Analytics
from streams.ingest.consumer import run_consumer
from streams.ingest.fleet import SCHEMA_NAME, demo_schema_text
from streams.ingest.hot_state import HotState
from streams.ingest.provision import provision
from streams.names import Names
from streams.observability.events import IngestBatchStats

TENANT = "acme"


async def seed_fleet(
    conn: Any,
    tenant: str,
    *,
    active: list[str],
    inactive: list[str] = (),  # type: ignore[assignment]
    unassigned: list[str] = (),
) -> None:  # type: ignore[assignment]
    """The demo schema and devices, registered through the registry."""
    text = demo_schema_text(tenant)
    await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
    for device in active:
        await registry.add_device(conn, tenant, device, schema=SCHEMA_NAME)
    for device in inactive:
        await registry.add_device(conn, tenant, device, schema=SCHEMA_NAME, active=False)
    for device in unassigned:
        await registry.add_device(conn, tenant, device)


def good_values(temp: float = 21.5) -> dict[str, Any]:
    return {
        "temp": temp,
        "rh": 40,
        "pressure_pa": 101325,
        "bat_mv": 3700,
        "door": 0,
        "wind": {"speed": 3.2, "dir": 270},
        "fw": "1.0",
    }


@dataclass
class Harness:
    """Publish envelopes, run the consumer until they are recorded, inspect the results."""

    settings: Settings
    names: Names
    nc: Any
    pool: asyncpg.Pool
    clickhouse: ClickHouse
    redis: aioredis.Redis

    async def publish(
        self,
        device: str,
        payload: Any,
        *,
        topic: str = "state",
        msg_id: str | None = None,
        raw: bytes | None = None,
        tenant: str = TENANT,
    ) -> int:
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        data = raw if raw is not None else orjson.dumps(payload)
        ack = await self.nc.jetstream().publish(
            self.names.telemetry_subject(tenant, device, topic), data, headers=headers
        )
        return int(ack.seq)

    async def count(self, sql: str = "SELECT count(*) FROM ingestion_messages", *args: Any) -> int:
        async with self.pool.acquire() as conn:
            return int(await conn.fetchval(sql, *args))

    async def consume(
        self,
        expected_rows: int,
        *,
        within: float = 20.0,
        settings: Settings | None = None,
        until: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[IngestBatchStats]:
        """Run the consumer until ``expected_rows`` ingestion rows exist (or ``until``)."""
        stop = asyncio.Event()
        stats: list[IngestBatchStats] = []
        task = asyncio.create_task(
            run_consumer(settings or self.settings, stop=stop, on_batch=stats.append)
        )
        deadline = time.monotonic() + within
        try:
            while time.monotonic() < deadline:
                if task.done():
                    task.result()
                done = await until() if until else await self.count() >= expected_rows
                if done:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(
                    f"timed out; {await self.count()} rows, wanted {expected_rows}"
                )
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        return stats

    async def message(self, stream_seq: int) -> asyncpg.Record:
        """The envelope's row as the ``ingestion_records`` view reads it: the columns its
        telemetry row carries filled in (migration 0020)."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT * FROM ingestion_records WHERE stream_seq = $1", stream_seq
            )
        assert row is not None, f"no ingestion row for stream seq {stream_seq}"
        return row

    async def stages(self, message_id: int) -> list[tuple[str, str, str | None]]:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT attempt, stage, status, error_code FROM ingestion_stage_logs "
                "WHERE message_id = $1 ORDER BY attempt, array_position(ARRAY['ingress',"
                "'validate','mutate','derive','persist','publish'], stage)",
                message_id,
            )
        return [(r["stage"], r["status"], r["error_code"]) for r in rows]

    async def telemetry(self, message_id: int) -> asyncpg.Record | None:
        async with self.pool.acquire() as conn:
            # As ``tideway messages show`` reads it: the values with their keys (0017).
            return await conn.fetchrow(sql.MESSAGE_TELEMETRY, message_id, None)

    async def stored_key(self, stream_seq: int, tenant: str = TENANT) -> str:
        """The dedupe key of a receipt without a message id, computed from what JetStream
        stored (its time in nanoseconds, as the consumer reads it)."""
        reply = await self.nc.request(
            f"$JS.API.STREAM.MSG.GET.{self.names.telemetry_stream}",
            orjson.dumps({"seq": stream_seq}), timeout=5)
        stamp = orjson.loads(reply.data)["message"]["time"]  # RFC 3339 with nanoseconds
        whole, _, fraction = stamp.rstrip("Z").partition(".")
        seconds = int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
        ns = seconds * 1_000_000_000 + int(fraction.ljust(9, "0")[:9] or 0)
        return f"r:{tenant}:{ns}:{stream_seq}"

    async def hot_state(self, device: str, tenant: str = TENANT) -> dict[str, Any]:
        return await HotState(self.redis).read(self.names.hot_state_key(tenant, device))

    async def analytics_rows(self, key: str | uuid.UUID | None = None) -> int:
        """Analytics rows (of the envelope with dedupe key ``key``: its text, or the digest
        an ``ingestion_messages`` row holds)."""
        table = f"{self.clickhouse.database}.{self.names.analytics_table}"
        if isinstance(key, uuid.UUID):
            where = " WHERE lower(hex(substring(SHA256(message_key), 1, 16))) = {k:String}"
            key = key.hex
        else:
            where = " WHERE message_key = {k:String}" if key else ""
        rows = await self.clickhouse.query_rows(
            f"SELECT count() FROM {table} FINAL{where}", {"k": key} if key else None
        )
        return int(rows[0][0])


def fast_settings(settings: Settings, **retry: Any) -> Settings:
    """Short retry delays so failure paths finish in a test's time."""
    values = {
        "publish_attempts": 2,
        "publish_base_s": 0.01,
        "publish_cap_s": 0.02,
        "redelivery_delay_s": 0.2,
        "redelivery_cap_s": 0.3,
        **retry,
    }
    consumer = settings.consumer.model_copy(update={"max_deliver": 2, "registry_ttl_s": 0.2})
    return settings.model_copy(update={"retry": RetrySettings(**values), "consumer": consumer})


@pytest.fixture
async def harness(settings: Settings, pg_pool: asyncpg.Pool) -> AsyncIterator[Harness]:
    settings = fast_settings(settings)
    await provision(settings)
    nc = await nats.connect(settings.nats())
    redis = aioredis.from_url(settings.redis())
    try:
        yield Harness(
            settings=settings,
            names=Names(namespace=settings.namespace),
            nc=nc,
            pool=pg_pool,
            clickhouse=ClickHouse(settings.clickhouse(), settings.clickhouse_database),
            redis=redis,
        )
    finally:
        await nc.close()
        await redis.aclose()


@pytest.fixture
async def fleet(harness: Harness) -> Harness:
    async with harness.pool.acquire() as conn:
        await seed_fleet(conn, TENANT, active=["d1", "d2"], inactive=["off"], unassigned=["bare"])
    return harness


__all__ = ["TENANT", "Analytics", "Harness", "good_values", "seed_fleet"]
