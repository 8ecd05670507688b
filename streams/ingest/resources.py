"""The connections one streaming process holds, opened and closed together.

Each is made by its adapter (``streams.adapters``): Postgres as
:func:`~streams.adapters.postgres.streaming_pool` (the hot path writes messages, telemetry and
stage passes with text ``COPY``, which needs no codecs), NATS with its reconnect policy, Redis
with short timeouts. Each process keeps one
:class:`streams.adapters.outage.Outages`, so that a dependency going down and coming back is
logged once each way, whoever notices it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from streams.adapters import postgres
from streams.adapters.nats import Nats, connect_nats
from streams.adapters.outage import Outages
from streams.adapters.postgres import Pool
from streams.adapters.redis import Redis, redis_client
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.errors import TransientError
from streams.names import Names


@dataclass(kw_only=True)
class Resources:
    """NATS, Postgres, Redis and ClickHouse handles for one process."""

    settings: Settings
    names: Names
    nc_: Nats | None
    pool: Pool
    redis: Redis
    clickhouse: ClickHouse
    outages: Outages = field(default_factory=Outages)
    """This process's view of which of them are down (see :mod:`streams.adapters.outage`)."""
    owns_pool: bool = True
    """False when the pool is the caller's (:meth:`around`): :meth:`close` leaves it open."""

    @classmethod
    async def open(cls, settings: Settings, *, name: str = "tideway-ingest",
                   pool_size: int | None = None, nats: bool = True,
                   outages: Outages | None = None) -> Resources:
        """Connect to everything (``TransientError`` if a service is unreachable).

        ``outages``: the trackers to report to, kept across attempts by a caller that retries
        (so that a service down at start-up is logged once, not once per attempt)."""
        outages = outages or Outages()
        size = pool_size or settings.consumer.concurrency + 2
        nc = (await connect_nats(settings.nats, name=name, trusted_subjects=True,
                                 outage=outages.nats) if nats else None)
        try:
            pool = await postgres.create_pool(settings.postgres(), postgres.streaming_pool(size))
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

    @classmethod
    def around(cls, settings: Settings, pool: Pool) -> Resources:
        """Redis and ClickHouse handles around a Postgres pool the caller keeps (the API
        process's shared pool): no NATS, and :meth:`close` leaves ``pool`` open. Nothing
        connects here; Redis connects on first use and ClickHouse's client is shared per DSN."""
        return cls(
            settings=settings, names=Names(namespace=settings.namespace), nc_=None, pool=pool,
            redis=redis_client(settings.redis()),
            clickhouse=ClickHouse(settings.clickhouse(), settings.clickhouse_database),
            owns_pool=False,
        )

    @property
    def nc(self) -> Nats:
        """The NATS connection (only when opened with ``nats=True``)."""
        assert self.nc_ is not None, "opened without NATS"
        return self.nc_

    async def close(self) -> None:
        """Flush pending NATS writes (acks) and close every connection.

        Each is closed whatever happened to the others: a NATS close that raises (or is
        cancelled) must not leave the Redis client's sockets or the pool open."""
        async with contextlib.AsyncExitStack() as closing:
            if self.owns_pool:
                closing.push_async_callback(self.pool.close)
            closing.push_async_callback(self.redis.aclose)
            if self.nc_ is not None:
                closing.push_async_callback(self.nc_.close)
                if not self.nc_.is_closed:
                    with contextlib.suppress(Exception):  # closing anyway
                        await self.nc_.flush(timeout=2)
