"""Postgres connections (asyncpg) and database administration.

The hot paths use asyncpg directly; JSONB and JSON columns are decoded with orjson by codecs
set on every pooled connection, so rows carry Python objects, not JSON strings (both matter:
``device_telemetry_logs.parameter_values`` is ``json``, which asyncpg would return as text).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import orjson

from streams.errors import TransientError

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


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


async def connect(dsn: str) -> asyncpg.Connection:
    """One connection with Tideway's codecs (for LISTEN, admin work and scripts)."""
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresConnectionError) as exc:
        raise TransientError(f"cannot connect to Postgres: {exc}", code="PG_UNAVAILABLE") from exc
    await _init_connection(conn)
    return conn


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    command_timeout: float | None = None,
    server_settings: dict[str, str] | None = None,
) -> asyncpg.Pool:
    """A connection pool with Tideway's codecs."""
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            command_timeout=command_timeout,
            server_settings=server_settings,
        )
    except (OSError, asyncpg.PostgresConnectionError) as exc:
        raise TransientError(f"cannot connect to Postgres: {exc}", code="PG_UNAVAILABLE") from exc
    assert pool is not None
    return pool


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database on the same server."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


async def create_database(admin_dsn: str, name: str, *, template: str | None = None) -> str:
    """Create database ``name`` (optionally from ``template``); returns its DSN."""
    _check_ident(name)
    sql = f'CREATE DATABASE "{name}"'
    if template:
        _check_ident(template)
        sql += f' TEMPLATE "{template}"'
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()
    return with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions."""
    _check_ident(name)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def database_exists(admin_dsn: str, name: str) -> bool:
    conn = await asyncpg.connect(admin_dsn)
    try:
        found: Any = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        return found is not None
    finally:
        await conn.close()


def _check_ident(name: str) -> None:
    if not _IDENT.match(name):
        raise ValueError(f"not a safe database name: {name!r}")
