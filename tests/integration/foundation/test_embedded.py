"""The embedded launcher starts real servers for unset URLs and stops them afterwards."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import nats
import nats.errors
import pytest
import redis.asyncio as aioredis

from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.embedded import embedded_services, quiet_platformdirs


def _port_open(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        return s.connect_ex((parts.hostname or "127.0.0.1", parts.port or 0)) == 0


async def test_starts_everything_unset_and_stops_it(tmp_path: Path, chdb_dsn: str) -> None:
    quiet_platformdirs()
    async with embedded_services(Settings(data_dir=tmp_path)) as (s, started):
        assert set(started.services) >= {"nats", "postgres", "redis", "clickhouse"}
        # chDB allows one engine path per process and this test process already has one,
        # so the embedded ClickHouse is checked by its location and used through that engine.
        assert s.clickhouse() == f"chdb://{tmp_path / 'clickhouse'}"
        assert (tmp_path / "clickhouse").is_dir()
        # Authentication is on: a client without credentials is refused, the operator's key
        # (the settings `up` hands its commands) is let in. No auth service runs here, so the
        # server refuses once its callout request goes unanswered: give it that time.
        refused = nats.NATS()
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await refused.connect(s.nats(), allow_reconnect=False, max_reconnect_attempts=0,
                                  connect_timeout=15)
        await refused.close()
        assert s.nats.nkey_seed_file is not None
        nc = await nats.connect(s.nats(), nkeys_seed=str(s.nats.nkey_seed_file))
        info = await nc.jetstream().account_info()
        assert info.limits is not None  # JetStream is on
        await nc.close()
        conn = await asyncpg.connect(s.postgres())
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
        r = aioredis.from_url(s.redis())
        assert await r.ping() is True
        await r.aclose()
        ch = ClickHouse(chdb_dsn, "probe")
        await ch.ensure_database()
        assert await ch.query_rows("SELECT 1 + 1") == [(2,)]
        nats_url, redis_url = s.nats(), s.redis()
    assert not _port_open(nats_url)
    assert not _port_open(redis_url)
    assert (tmp_path / "postgres" / "pgdata" / "PG_VERSION").exists()


async def test_configured_urls_are_used_as_they_are(tmp_path: Path, nats_url: str) -> None:
    configured = Settings(
        data_dir=tmp_path,
        nats_url=nats_url,
        redis_url="redis://127.0.0.1:6379/0",
        postgres_dsn="postgresql://postgres@127.0.0.1:5432/postgres",
        clickhouse_dsn="chdb://" + str(tmp_path / "ch"),
    )
    async with embedded_services(configured) as (s, started):
        assert started.services == {}
        assert s.nats() == nats_url
