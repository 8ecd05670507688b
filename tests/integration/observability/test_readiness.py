"""Each readiness check factory against the real service it checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, StreamConfig

from streams.clickhouse import ClickHouse
from streams.names import Names
from streams.objects import ObjectStore
from streams.observability.readiness import (
    clickhouse_check,
    nats_check,
    object_store_check,
    postgres_check,
    redis_check,
    run_checks,
)


@pytest.fixture
async def nc(nats_url: str, names: Names) -> AsyncIterator[NATS]:
    client = await nats.connect(nats_url)
    js = client.jetstream()
    await js.add_stream(StreamConfig(name=names.telemetry_stream,
                                     subjects=[names.telemetry_subjects]))
    await js.add_consumer(names.telemetry_stream,
                          ConsumerConfig(durable_name=names.ingest_durable))
    try:
        yield client
    finally:
        if not client.is_closed:
            await client.close()


async def test_every_factory_passes_on_a_healthy_service(
    pg_pool: asyncpg.Pool, redis_url: str, nc: NATS, names: Names, chdb_dsn: str,
    tmp_path: Path,
) -> None:
    client = aioredis.from_url(redis_url)
    try:
        checks = [
            postgres_check(pg_pool),
            redis_check(client),
            nats_check(nc, stream=names.telemetry_stream, durable=names.ingest_durable),
            clickhouse_check(ClickHouse(chdb_dsn, "default")),
            object_store_check(ObjectStore(str(tmp_path / "objects"))),
        ]
        results = await run_checks(checks, timeout_s=10)
    finally:
        await client.aclose()
    assert [(r.name, r.ok, r.reason) for r in results] == [
        ("postgres", True, ""), ("redis", True, ""), ("nats", True, ""),
        ("clickhouse", True, ""), ("object_store", True, ""),
    ]


async def test_nats_check_fails_without_the_consumer_and_when_disconnected(
    nc: NATS, names: Names
) -> None:
    missing = nats_check(nc, stream=names.telemetry_stream, durable="nobody")
    present = nats_check(nc, stream=names.telemetry_stream, durable=names.ingest_durable)
    (result,) = await run_checks([missing], timeout_s=5)
    assert not result.ok and "NotFound" in result.reason
    await nc.close()
    (result,) = await run_checks([present], timeout_s=5)
    assert (result.ok, result.reason) == (False, "ConnectionError: not connected to NATS")


async def test_postgres_check_fails_on_a_closed_pool(pg_pool: asyncpg.Pool) -> None:
    await pg_pool.close()
    (result,) = await run_checks([postgres_check(pg_pool)], timeout_s=5)
    assert not result.ok and result.name == "postgres" and result.reason


async def test_redis_check_fails_when_nothing_listens() -> None:
    client = aioredis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        (result,) = await run_checks([redis_check(client)], timeout_s=5)
    finally:
        await client.aclose()
    assert not result.ok and "ConnectionError" in result.reason
