"""The connections one streaming process holds, opened and closed together.

Postgres uses ``streams.db``'s pool (JSON and JSONB decoded with orjson); the hot path
writes messages, telemetry and stage passes with text ``COPY``, which needs no codecs.
Redis gets short timeouts so that a dead server is noticed in about a second, not after the
kernel gives up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import asyncpg
import nats
import redis.asyncio as aioredis
from asyncpg.pool import PoolConnectionProxy
from nats.aio.client import Client as Nats

from streams import db
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.errors import TransientError
from streams.names import Names

Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
"""A connection, pooled or not."""

async def pg_pool(dsn: str, *, size: int) -> asyncpg.Pool:
    """A pool for the streaming pipeline (Tideway's codecs, tuned for small statements)."""
    return await db.create_pool(
        dsn,
        max_size=size,
        command_timeout=60,
        # Small, frequent, index-driven statements: parallel workers and JIT only add
        # start-up cost (and steal cores the consumer needs). Every statement is planned for
        # its own parameters: after five executions Postgres may switch a prepared statement
        # to a generic plan, and one made while the tables were small (a new deployment) joins
        # a batch's thousands of keys against a sequential scan: the dedupe read took 13 s at
        # 50,000 recorded envelopes instead of 15 ms (tests/integration/ingest/test_sql.py).
        server_settings={"jit": "off", "max_parallel_workers_per_gather": "0",
                         "plan_cache_mode": "force_custom_plan"},
    )


def redis_client(url: str) -> aioredis.Redis:
    """A Redis client that fails fast when the server is unreachable."""
    return aioredis.from_url(
        url, socket_connect_timeout=1.0, socket_timeout=5.0, health_check_interval=0
    )


async def nats_connect(url: str, *, name: str, trusted_subjects: bool = False) -> Nats:
    """A NATS connection that keeps reconnecting (a restarted server is not fatal).

    ``trusted_subjects`` skips the client's per-publish subject check: the consumer only
    publishes to reply subjects the server handed it and to subjects built from validated
    names, and the check is a measurable share of acknowledging thousands of envelopes/s.
    """
    try:
        return await nats.connect(
            url, name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
            connect_timeout=2, allow_reconnect=True,
            skip_subject_validation=trusted_subjects,
        )
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        raise TransientError(f"cannot connect to NATS: {exc}", code="NATS_UNAVAILABLE") from exc


@dataclass(kw_only=True)
class Resources:
    """NATS, Postgres, Redis and ClickHouse handles for one process."""

    settings: Settings
    names: Names
    nc_: Nats | None
    pool: asyncpg.Pool
    redis: aioredis.Redis
    clickhouse: ClickHouse

    @classmethod
    async def open(cls, settings: Settings, *, name: str = "tideway-ingest",
                   pool_size: int | None = None, nats: bool = True) -> Resources:
        """Connect to everything (``TransientError`` if a service is unreachable)."""
        size = pool_size or settings.consumer.concurrency + 2
        nc = await nats_connect(settings.nats(), name=name, trusted_subjects=True) if nats else None
        try:
            pool = await pg_pool(settings.postgres(), size=size)
        except BaseException:
            if nc is not None:
                await nc.close()
            raise
        return cls(
            settings=settings, names=Names(namespace=settings.namespace), nc_=nc, pool=pool,
            redis=redis_client(settings.redis()),
            clickhouse=ClickHouse(settings.clickhouse(), settings.clickhouse_database),
        )

    @property
    def nc(self) -> Nats:
        """The NATS connection (only when opened with ``nats=True``)."""
        assert self.nc_ is not None, "opened without NATS"
        return self.nc_

    async def close(self) -> None:
        """Flush pending NATS writes (acks) and close every connection."""
        try:
            if self.nc_ is not None and not self.nc_.is_closed:
                await self.nc_.flush(timeout=2)
        except Exception:  # closing anyway
            pass
        finally:
            if self.nc_ is not None:
                await self.nc_.close()
            await self.redis.aclose()
            await self.pool.close()
