"""A Postgres restart mid-ingest (what a failover looks like to a consumer): the connections
drop, batches in flight fail with PG_UNAVAILABLE and are nak'ed, the consumer waits for the
server and goes on — nothing lost, nothing recorded twice.

The test runs its own throwaway server (the ``pgserver`` wheel's bundled Postgres, on a unix
socket in a private directory) and restarts it with ``pg_ctl restart -m immediate``: every
backend killed without a checkpoint, uncommitted transactions gone, as when a primary dies and
a replica takes its address.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerInfo

from streams import migrate
from streams.adapters import postgres
from streams.config import Settings
from streams.ingest.consumer import run_consumer
from streams.ingest.provision import provision
from streams.names import Names
from tests.integration.ingest.conftest import TENANT, fast_settings, good_values, seed_fleet

pgserver = pytest.importorskip("pgserver")
from pgserver._commands import pg_ctl  # noqa: E402 (after the skip)

TOTAL = 600


@pytest.fixture
async def private_pg() -> AsyncIterator[tuple[object, str]]:
    """A throwaway Postgres (pgserver) with a migrated ``tideway`` database."""
    data = Path(tempfile.mkdtemp(prefix="tw-failover-"))
    server = await asyncio.to_thread(pgserver.get_server, data / "pgdata", cleanup_mode="stop")
    try:
        admin = str(server.get_uri())
        dsn = await postgres.create_database(admin, "tideway")
        await asyncio.to_thread(migrate.upgrade, dsn)
        yield server, dsn
    finally:
        await asyncio.to_thread(server.cleanup)
        shutil.rmtree(data, ignore_errors=True)


def _restart(server: object) -> None:
    pg_ctl(["-w", "-m", "immediate", "restart"], pgdata=server.pgdata,  # type: ignore[attr-defined]
           user=server.system_user, timeout=60)  # type: ignore[attr-defined]


async def test_postgres_restart_mid_ingest_loses_nothing_and_doubles_nothing(
    settings: Settings, private_pg: tuple[object, str]
) -> None:
    server, dsn = private_pg
    settings = fast_settings(settings.with_services(postgres_dsn=dsn))
    names = Names(namespace=settings.namespace)
    await provision(settings)
    conn = await postgres.connect(dsn)
    try:
        await seed_fleet(conn, TENANT, active=["d1", "d2"])
    finally:
        await conn.close()

    async def recorded() -> int:
        # A fresh connection each time: the restart kills every open one.
        with contextlib.suppress(Exception):
            probe = await postgres.connect(dsn)
            try:
                return int(await probe.fetchval("SELECT count(*) FROM ingestion_messages"))
            finally:
                await probe.close()
        return -1

    nc = await nats.connect(settings.nats())
    js = nc.jetstream()

    async def publish_steadily() -> None:  # a steady stream, before, during and after
        for i in range(TOTAL):
            await js.publish(names.telemetry_subject(TENANT, f"d{1 + i % 2}", "state"),
                             _body(i), headers={"Nats-Msg-Id": f"f-{i}"})
            await asyncio.sleep(0.005)

    stop = asyncio.Event()
    consumer = asyncio.create_task(run_consumer(settings, stop=stop))
    publisher = asyncio.create_task(publish_steadily())
    try:
        await _until(lambda: _at_least(recorded, TOTAL // 4), within=60)
        await asyncio.to_thread(_restart, server)  # mid-ingest: batches are in flight
        assert not consumer.done()
        await publisher
        await _until(lambda: _at_least(recorded, TOTAL), within=120)
        assert not consumer.done(), consumer
        # A batch whose commit went through as the server died was nak'ed (its commit could
        # not be confirmed): wait for its redelivery to be handled and acked too.
        await _until(lambda: _settled(settings, names), within=60)
    finally:
        stop.set()
        await asyncio.wait_for(consumer, 30)
        publisher.cancel()
        await nc.close()

    conn = await postgres.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT source_deduplication_key AS key, status FROM ingestion_messages")
        telemetry = await conn.fetchval("SELECT count(*) FROM device_telemetry_logs")
    finally:
        await conn.close()
    keys = [r["key"] for r in rows]
    assert len(keys) == TOTAL and len(set(keys)) == TOTAL  # nothing lost, nothing doubled
    assert {r["status"] for r in rows} == {"completed"}
    assert telemetry == TOTAL


async def _until(check: Callable[[], Awaitable[bool]], *, within: float) -> None:
    async with asyncio.timeout(within):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


async def _at_least(count: Callable[[], Awaitable[int]], target: int) -> bool:
    return await count() >= target


async def _settled(settings: Settings, names: Names) -> bool:
    info = await _consumer_info(settings, names)
    return info.num_ack_pending == 0 and info.num_pending == 0


def _body(i: int) -> bytes:
    import orjson

    return orjson.dumps({"ts": i, "values": good_values()})


async def _consumer_info(settings: Settings, names: Names) -> ConsumerInfo:
    nc = await nats.connect(settings.nats())
    try:
        return await nc.jetstream().consumer_info(names.telemetry_stream, names.ingest_durable)
    finally:
        await nc.close()
