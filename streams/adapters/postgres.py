"""Postgres (asyncpg): every pool and connection Tideway opens, and database administration.

One set of defaults for all of them: JSONB and JSON decoded with orjson by codecs set on every
connection, so rows carry Python objects, not JSON strings (both matter:
``device_telemetry_logs.parameter_values`` is ``json``, which asyncpg would return as text); a
statement cache of :data:`STATEMENT_CACHE` prepared statements per connection (or the DSN's
``statement_cache_size`` query parameter, which ``Settings.postgres()`` adds from
``TIDEWAY_POSTGRES_STATEMENT_CACHE_SIZE``; 0 behind PgBouncer < 1.21 in transaction mode); at
most :data:`CONNECT_TIMEOUT` seconds to connect. A process that needs a pool of its own size or
session settings names a :class:`PoolShape` here (:data:`API_POOL`, :func:`streaming_pool`…),
so the differences between processes are all in one place. The batch side's pools (intake,
workers, executors) get their time limits from the ``postgres_timeouts`` settings through
:func:`batch_pool`: every statement is cancelled after ``command_s`` and every connection
attempt given up after ``connect_s``, so a server that hangs costs a retry, not a stuck process.

A server that cannot be reached (refused, reset, shutting down, starting up) is a
``TransientError`` with code ``PG_UNAVAILABLE`` (:func:`streams.adapters.errors.pg_unavailable`),
whether the pool or the connection is being opened. What a statement's failure means is
classified in :mod:`streams.adapters.errors`. :data:`Pool` and :data:`Connection` name
asyncpg's types for the code that holds them, so that only the adapters import asyncpg.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from streams.adapters.errors import PG_UNREACHABLE, pg_unavailable
from streams.config import PostgresTimeoutSettings

__all__ = [
    "API_POOL",
    "CONNECT_TIMEOUT",
    "EXECUTOR_POOL",
    "INTAKE_POOL",
    "STATEMENT_CACHE",
    "WORKER_POOL",
    "Conn",
    "Connection",
    "Pool",
    "PoolShape",
    "batch_pool",
    "connect",
    "create_database",
    "create_pool",
    "database_exists",
    "drop_database",
    "split_dsn",
    "streaming_pool",
    "with_database",
]

Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
"""A connection made by :func:`connect` or acquired from a pool made by :func:`create_pool`."""
Pool: TypeAlias = asyncpg.Pool
"""A pool made by :func:`create_pool`."""
Connection: TypeAlias = asyncpg.Connection
"""A connection made by :func:`connect` (one of its own: LISTEN, a session lock)."""

STATEMENT_CACHE: Final = 100
"""Prepared statements kept per connection (asyncpg's default, stated once here)."""
CONNECT_TIMEOUT: Final = 60.0
"""Seconds to establish one connection (asyncpg's default, stated once here)."""

@dataclass(frozen=True, kw_only=True, slots=True)
class PoolShape:
    """A process's pool: its size, and settings for each of its sessions."""

    max_size: int
    min_size: int = 1
    """Idle connections kept open; with 0, :func:`create_pool` connects once to check."""
    command_timeout: float | None = None
    """Seconds a statement may run before asyncpg cancels it (``None``: no limit)."""
    connect_timeout: float = CONNECT_TIMEOUT
    """Seconds to open one of its connections."""
    server_settings: Mapping[str, str] = field(default_factory=dict)


API_POOL: Final = PoolShape(max_size=8, server_settings={"jit": "off"})
"""The HTTP API (``tideway api``): handlers hold a connection for one short query each. No
JIT: the console's window statements over a large fleet cost enough to be compiled, which
took over a second for a statement that runs in tens of milliseconds."""
INTAKE_POOL: Final = PoolShape(max_size=4)
"""Session intake: one notice at a time, plus uploads' reference checks."""
WORKER_POOL: Final = PoolShape(max_size=4)
"""The job worker's claims, heartbeats and completions (its LISTEN connection is extra)."""
EXECUTOR_POOL: Final = PoolShape(max_size=2)
"""The I/O job executors (materialise, publish) of one worker."""


def batch_pool(shape: PoolShape, limits: PostgresTimeoutSettings) -> PoolShape:
    """``shape`` with the batch side's time limits (``Settings.postgres_timeouts``): pass
    ``batch_pool(INTAKE_POOL, settings.postgres_timeouts)`` (or the worker's, the executors')
    to :func:`create_pool`. A statement past ``command_s`` raises ``TimeoutError``."""
    return replace(shape, command_timeout=limits.command_s, connect_timeout=limits.connect_s)

# Small, frequent, index-driven statements: parallel workers and JIT only add start-up cost
# (and steal cores the consumer needs). Every statement is planned for its own parameters:
# after five executions Postgres may switch a prepared statement to a generic plan, and one
# made while the tables were small (a new deployment) joins a batch's thousands of keys
# against a sequential scan: the dedupe read took 13 s at 50,000 recorded envelopes instead of
# 15 ms (tests/integration/ingest/test_sql.py).
_STREAMING_SETTINGS: Final = {
    "jit": "off", "max_parallel_workers_per_gather": "0", "plan_cache_mode": "force_custom_plan",
}


def streaming_pool(size: int) -> PoolShape:
    """The streaming pipeline's pool (ingest, replay, dead letters, message lookups, simulate).

    No floor of idle connections: asyncpg restores a floor in the background after
    connections are lost, logging a traceback for every failed attempt, so an outage would fill
    the log with them. The batches reconnect on demand and report the outage
    (``streams.adapters.outage``) themselves.
    """
    return PoolShape(min_size=0, max_size=size, command_timeout=60,
                     server_settings=_STREAMING_SETTINGS)


_JSONB_VERSION = b"\x01"


def _encode_jsonb(value: Any) -> bytes:
    return _JSONB_VERSION + orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def _decode_jsonb(data: bytes) -> Any:
    return orjson.loads(data[1:])


async def _init_connection(conn: asyncpg.Connection) -> None:
    # JSONB in binary form (a version byte, then the JSON), which spares Postgres the text
    # conversion on reads and on parameters.
    await conn.set_type_codec(
        "jsonb",
        encoder=_encode_jsonb,
        decoder=_decode_jsonb,
        schema="pg_catalog",
        format="binary",
    )
    # Plain JSON in text form; ``device_telemetry_logs.parameter_values`` is read through it.
    await conn.set_type_codec(
        "json",
        encoder=lambda v: orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode(),
        decoder=orjson.loads,
        schema="pg_catalog",
    )


_CACHE_OPTION: Final = "statement_cache_size"


def split_dsn(dsn: str) -> tuple[str, int]:
    """``dsn`` without its ``statement_cache_size`` query parameter, and that size
    (:data:`STATEMENT_CACHE` when absent).

    asyncpg would send an unknown query parameter to the server as a session setting, and the
    server would refuse it, so the option is taken out here."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    sizes = [int(v) for k, v in query if k == _CACHE_OPTION]
    if not sizes:
        return dsn, STATEMENT_CACHE
    rest = urlencode([(k, v) for k, v in query if k != _CACHE_OPTION])
    return urlunsplit(parts._replace(query=rest)), sizes[-1]


async def connect(dsn: str, *, limits: PostgresTimeoutSettings | None = None
                  ) -> asyncpg.Connection:
    """One connection with Tideway's codecs (for LISTEN, admin work and scripts);
    ``TransientError`` (``PG_UNAVAILABLE``) if Postgres cannot be reached now. ``limits``:
    the batch side's connect and statement time limits (none but :data:`CONNECT_TIMEOUT`
    without)."""
    dsn, cache = split_dsn(dsn)
    timeout = CONNECT_TIMEOUT if limits is None else limits.connect_s
    try:
        conn = await asyncpg.connect(
            dsn, timeout=timeout, statement_cache_size=cache,
            command_timeout=None if limits is None else limits.command_s,
        )
    except PG_UNREACHABLE as exc:
        raise pg_unavailable(exc) from exc
    await _init_connection(conn)
    return conn


async def create_pool(dsn: str, shape: PoolShape) -> asyncpg.Pool:
    """A pool of ``shape`` with Tideway's codecs; ``TransientError`` (``PG_UNAVAILABLE``) if
    Postgres cannot be reached now."""
    dsn, cache = split_dsn(dsn)
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=shape.min_size,
            max_size=shape.max_size,
            init=_init_connection,
            timeout=shape.connect_timeout,
            statement_cache_size=cache,
            command_timeout=shape.command_timeout,
            server_settings=dict(shape.server_settings) or None,
        )
    except PG_UNREACHABLE as exc:
        raise pg_unavailable(exc) from exc
    assert pool is not None
    if shape.min_size == 0:
        try:
            async with pool.acquire():  # connect once now: a server that is down is found here
                pass
        except PG_UNREACHABLE as exc:
            await pool.close()
            raise pg_unavailable(exc) from exc
    return pool


_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database on the same server."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


@contextlib.asynccontextmanager
async def _admin(admin_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    admin_dsn, cache = split_dsn(admin_dsn)
    conn = await asyncpg.connect(admin_dsn, timeout=CONNECT_TIMEOUT, statement_cache_size=cache)
    try:
        yield conn
    finally:
        await conn.close()


async def create_database(admin_dsn: str, name: str, *, template: str | None = None) -> str:
    """Create database ``name`` (optionally from ``template``); returns its DSN."""
    _check_ident(name)
    sql = f'CREATE DATABASE "{name}"'
    if template:
        _check_ident(template)
        sql += f' TEMPLATE "{template}"'
    async with _admin(admin_dsn) as conn:
        await conn.execute(sql)
    return with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions."""
    _check_ident(name)
    async with _admin(admin_dsn) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def database_exists(admin_dsn: str, name: str) -> bool:
    """Whether database ``name`` exists on the server of ``admin_dsn``."""
    async with _admin(admin_dsn) as conn:
        found: Any = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        return found is not None


def _check_ident(name: str) -> None:
    if not _IDENT.match(name):
        raise ValueError(f"not a safe database name: {name!r}")
