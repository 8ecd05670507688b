"""Postgres going away mid-stream: delayed redelivery, no hot loop, nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.integration.ingest.conftest import Harness, fast_settings, good_values


class Proxy:
    """A TCP proxy in front of Postgres that the test can cut and restore."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.up = True
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        self.up = False
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def pg_proxy(fleet: Harness) -> AsyncIterator[Proxy]:
    parts = urlsplit(fleet.settings.postgres())
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def test_postgres_outage_delays_envelopes_and_loses_none(
    fleet: Harness, pg_proxy: Proxy
) -> None:
    dsn = urlsplit(fleet.settings.postgres())
    via_proxy = urlunsplit(dsn._replace(netloc=f"{dsn.username}@127.0.0.1:{pg_proxy.port}"))
    settings = fleet.settings.with_services(postgres_dsn=via_proxy)
    for i in range(5):
        await fleet.publish("d1", {"ts": i, "values": good_values()}, msg_id=f"o-{i}")

    stop = asyncio.Event()
    from streams.ingest.consumer import run_consumer

    task = asyncio.create_task(run_consumer(settings, stop=stop))
    try:
        for _ in range(200):
            if await fleet.count() >= 5:
                break
            await asyncio.sleep(0.05)
        assert await fleet.count() == 5
        pg_proxy.cut()  # Postgres is now unreachable for the consumer
        for i in range(5, 10):
            await fleet.publish("d1", {"ts": i, "values": good_values()}, msg_id=f"o-{i}")
        await asyncio.sleep(2.0)
        assert await fleet.count() == 5  # nothing recorded while it is down...
        info = await fleet.nc.jetstream().consumer_info(fleet.names.telemetry_stream,
                                                        fleet.names.ingest_durable)
        assert info.delivered.consumer_seq < 5 + 5 * 25  # ...and no hot redelivery loop
        pg_proxy.up = True  # back again
        # The envelopes nak'ed during the outage come back after their backoff: full jitter
        # floored at 2 s and doubling per delivery, so up to 8 s after a third delivery, plus
        # the worker's own pause. Wait longer than that (a 10 s wait failed once in CI).
        for _ in range(600):
            if await fleet.count() >= 10:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    assert await fleet.count() == 10
    assert await fleet.count("SELECT count(*) FROM ingestion_messages "
                             "WHERE status = 'completed'") == 10
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 10
    assert await fleet.analytics_rows() == 100


async def test_consumer_started_while_postgres_is_down_waits_for_it(
    fleet: Harness, pg_proxy: Proxy
) -> None:
    dsn = urlsplit(fleet.settings.postgres())
    via_proxy = urlunsplit(dsn._replace(netloc=f"{dsn.username}@127.0.0.1:{pg_proxy.port}"))
    settings = fleet.settings.with_services(postgres_dsn=via_proxy)
    pg_proxy.cut()
    await fleet.publish("d1", {"ts": 1, "values": good_values()})
    stop = asyncio.Event()
    from streams.ingest.consumer import run_consumer

    task = asyncio.create_task(run_consumer(settings, stop=stop))
    try:
        await asyncio.sleep(1.0)
        assert not task.done()  # waiting, not crashed
        pg_proxy.up = True
        for _ in range(200):
            if await fleet.count() >= 1:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    assert await fleet.count() == 1


async def test_a_lock_timeout_defers_the_batch_and_dead_letters_nothing(fleet: Harness) -> None:
    """A lock timeout refuses every row alike (here: a maintenance lock on the telemetry
    table outlasting the database's lock_timeout). It is not a poison envelope: the batch is
    redelivered and recorded once the lock is gone, not split and dead-lettered."""
    async with fleet.pool.acquire() as conn:
        database = await conn.fetchval("SELECT current_database()")
        await conn.execute(f'ALTER DATABASE "{database}" SET lock_timeout = \'300ms\'')
    seqs = [await fleet.publish("d1", {"ts": 1000 + i, "seq": i, "values": good_values()})
            for i in range(4)]
    blocker = await asyncpg.connect(fleet.settings.postgres())
    lock = blocker.transaction()
    await lock.start()
    await blocker.execute("LOCK TABLE device_telemetry_logs IN SHARE MODE")

    async def release_later() -> None:
        await asyncio.sleep(2.0)  # several recording attempts time out meanwhile
        await lock.rollback()

    release = asyncio.create_task(release_later())
    try:
        await fleet.consume(4, within=30, settings=fast_settings(fleet.settings))
    finally:
        await release
        await blocker.close()
    assert [(await fleet.message(s))["status"] for s in seqs] == ["completed"] * 4
    assert await fleet.count("SELECT count(*) FROM dead_letters") == 0
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 4
