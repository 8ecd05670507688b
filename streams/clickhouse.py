"""The ClickHouse adapter: one client per process, used from async code.

clickhouse-connect's chDB backend (``chdb://``) is synchronous and allows one engine path per
process, so every call goes through one client, serialised by a lock and run in a worker thread
to keep the event loop free. The same code talks to a real server with an ``http(s)://`` DSN.
Errors are translated to ``TransientError`` (server or engine unavailable) here, once.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from typing import Any

import clickhouse_connect
import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, ProgrammingError

from streams.errors import TransientError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CLIENTS: dict[str, Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _client_for(dsn: str) -> Client:
    # chDB refuses a second engine path in one process, so clients are shared per DSN.
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(dsn)
        if client is None:
            client = clickhouse_connect.get_client(dsn=dsn)
            _CLIENTS[dsn] = client
        return client


def ident(name: str) -> str:
    """Check that ``name`` is a plain identifier (database or table) and return it."""
    if not _IDENT.match(name):
        raise ValueError(f"not a safe ClickHouse identifier: {name!r}")
    return name


class ClickHouse:
    """Async facade over one ClickHouse database."""

    def __init__(self, dsn: str, database: str):
        self.dsn = dsn
        self.database = ident(database)
        self._lock = threading.Lock()

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            with self._lock:
                try:
                    return fn(_client_for(self.dsn), *args, **kwargs)
                except ProgrammingError as exc:
                    if self.dsn.startswith("chdb:") and "open the chdb engine" in str(exc):
                        raise TransientError(
                            f"the in-process ClickHouse at {self.dsn} belongs to another process"
                            " (tideway up); run this command there or use a ClickHouse server",
                            code="CLICKHOUSE_BUSY",
                        ) from exc
                    raise TransientError(f"ClickHouse: {exc}", code="CLICKHOUSE_ERROR") from exc
                except ClickHouseError as exc:
                    raise TransientError(f"ClickHouse: {exc}", code="CLICKHOUSE_ERROR") from exc
                except OSError as exc:
                    raise TransientError(
                        f"ClickHouse unavailable: {exc}", code="CLICKHOUSE_UNAVAILABLE"
                    ) from exc

        return await asyncio.to_thread(call)

    async def ensure_database(self) -> None:
        await self.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")

    async def command(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        """Run a statement (DDL, DELETE, OPTIMIZE...)."""
        return await self._run(lambda c: c.command(sql, parameters=parameters))

    async def query_rows(
        self, sql: str, parameters: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run a query and return its rows as tuples."""
        rows: list[tuple[Any, ...]] = await self._run(
            lambda c: list(c.query(sql, parameters=parameters).result_rows)
        )
        return rows

    async def query_arrow(self, sql: str, parameters: dict[str, Any] | None = None) -> pa.Table:
        table: pa.Table = await self._run(lambda c: c.query_arrow(sql, parameters=parameters))
        return table

    async def insert_rows(
        self, table: str, rows: Sequence[Sequence[Any]], column_names: Sequence[str]
    ) -> None:
        """Insert plain rows into ``database.table``."""
        if not rows:
            return
        await self._run(
            lambda c: c.insert(
                ident(table), rows, column_names=list(column_names), database=self.database
            )
        )

    async def insert_arrow(
        self, table: str, data: pa.Table, settings: dict[str, Any] | None = None
    ) -> None:
        """Insert an Arrow table into ``database.table`` (column names must match), with
        optional per-insert ClickHouse ``settings``."""
        if data.num_rows == 0:
            return
        await self._run(lambda c: c.insert_arrow(ident(table), data, database=self.database,
                                                 settings=settings))
