"""The connections one streaming process holds, opened and closed together.

Postgres uses ``streams.db``'s pool (JSON and JSONB decoded with orjson); the hot path
writes messages, telemetry and stage passes with text ``COPY``, which needs no codecs.
Redis gets short timeouts so that a dead server is noticed in about a second, not after the
kernel gives up. Each process keeps one :class:`streams.ingest.outage.Outages`, so that a
dependency going down and coming back is logged once each way, whoever notices it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TypeAlias

import asyncpg
import redis.asyncio as aioredis
from asyncpg.pool import PoolConnectionProxy
from nats import errors as nats_errors
from nats.aio.client import Client as Nats

from streams import db
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.errors import TransientError
from streams.ingest.outage import Outage, Outages, describe
from streams.names import Names

log = logging.getLogger(__name__)

Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
"""A connection, pooled or not."""

async def pg_pool(dsn: str, *, size: int) -> asyncpg.Pool:
    """A pool for the streaming pipeline (Tideway's codecs, tuned for small statements);
    ``TransientError`` (``PG_UNAVAILABLE``) if Postgres cannot be reached now."""
    pool = await db.create_pool(
        dsn,
        # No floor of idle connections: asyncpg restores a floor in the background after
        # connections are lost, logging a traceback for every failed attempt, so an outage
        # would fill the log with them. The batches reconnect on demand and report the
        # outage (streams.ingest.outage) themselves.
        min_size=0,
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
    try:
        async with pool.acquire():  # connect once now: a server that is down is found here
            pass
    except (OSError, asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError,
            asyncpg.AdminShutdownError, asyncpg.CrashShutdownError) as exc:
        await pool.close()
        raise TransientError(f"cannot connect to Postgres: {exc}", code="PG_UNAVAILABLE") from exc
    return pool


def redis_client(url: str) -> aioredis.Redis:
    """A Redis client that fails fast when the server is unreachable."""
    return aioredis.from_url(
        url, socket_connect_timeout=1.0, socket_timeout=5.0, health_check_interval=0
    )


# What nats-py reports while a server is unreachable, restarting or dropping the connection:
# expected during any outage, so they mark the outage instead of logging a traceback each
# (nats-py's default callback logs every failed reconnect attempt at ERROR with one).
_NATS_CONNECTION_ERRORS = (
    OSError, asyncio.TimeoutError, nats_errors.StaleConnectionError,
    nats_errors.ConnectionClosedError, nats_errors.NoServersError,
    nats_errors.OutboundBufferLimitError, nats_errors.ProtocolError,
    nats_errors.ConnectionReconnectingError,
)


async def nats_connect(url: str, *, name: str, trusted_subjects: bool = False,
                       outage: Outage | None = None) -> Nats:
    """A NATS connection that keeps reconnecting (a restarted server is not fatal).

    ``trusted_subjects`` skips the client's per-publish subject check: the consumer only
    publishes to reply subjects the server handed it and to subjects built from validated
    names, and the check is a measurable share of acknowledging thousands of envelopes/s.

    Disconnects, failed reconnect attempts and reconnects are reported to ``outage`` (one
    WARNING when the connection is lost, one INFO when it is back); any other error nats-py
    reports is logged as a WARNING, and only one it has no class for gets a traceback.
    """
    tracker = outage or Outage("nats")
    nc = Nats()

    async def on_error(exc: Exception) -> None:
        if isinstance(exc, _NATS_CONNECTION_ERRORS):
            if not nc.is_closed:  # closing on purpose: what the socket says then is no outage
                tracker.failed(exc)
        elif isinstance(exc, nats_errors.Error):  # one nats-py names: say it, no traceback
            log.warning("nats: %s", describe(exc))
        else:
            log.error("nats: unexpected error", exc_info=exc)

    async def on_disconnect() -> None:
        if not nc.is_closed:  # close() reports a disconnect too
            tracker.failed("connection lost")

    async def on_reconnect() -> None:
        tracker.recovered()

    try:
        await nc.connect(
            url, name=name, max_reconnect_attempts=-1,
            # nats-py annotates this as int seconds, but only ever sleeps for it.
            reconnect_time_wait=0.5,  # type: ignore[arg-type]
            connect_timeout=2, allow_reconnect=True,
            skip_subject_validation=trusted_subjects, error_cb=on_error,
            disconnected_cb=on_disconnect, reconnected_cb=on_reconnect,
        )
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        tracker.failed(exc)
        raise TransientError(f"cannot connect to NATS: {exc}", code="NATS_UNAVAILABLE") from exc
    tracker.recovered()
    return nc


@dataclass(kw_only=True)
class Resources:
    """NATS, Postgres, Redis and ClickHouse handles for one process."""

    settings: Settings
    names: Names
    nc_: Nats | None
    pool: asyncpg.Pool
    redis: aioredis.Redis
    clickhouse: ClickHouse
    outages: Outages = field(default_factory=Outages)
    """This process's view of which of them are down (see :mod:`streams.ingest.outage`)."""

    @classmethod
    async def open(cls, settings: Settings, *, name: str = "tideway-ingest",
                   pool_size: int | None = None, nats: bool = True,
                   outages: Outages | None = None) -> Resources:
        """Connect to everything (``TransientError`` if a service is unreachable).

        ``outages``: the trackers to report to, kept across attempts by a caller that retries
        (so that a service down at start-up is logged once, not once per attempt)."""
        outages = outages or Outages()
        size = pool_size or settings.consumer.concurrency + 2
        nc = (await nats_connect(settings.nats(), name=name, trusted_subjects=True,
                                 outage=outages.nats) if nats else None)
        try:
            pool = await pg_pool(settings.postgres(), size=size)
        except BaseException as exc:
            if isinstance(exc, TransientError):
                outages.postgres.failed(exc)
            if nc is not None:
                await nc.close()
            raise
        outages.postgres.recovered()
        return cls(
            settings=settings, names=Names(namespace=settings.namespace), nc_=nc, pool=pool,
            redis=redis_client(settings.redis()),
            clickhouse=ClickHouse(settings.clickhouse(), settings.clickhouse_database),
            outages=outages,
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
