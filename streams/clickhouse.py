"""The ClickHouse adapter: one client per process, used from async code.

clickhouse-connect's chDB backend (``chdb://``) is synchronous and allows one engine path per
process, so every call goes through one client, serialised by a lock and run in a worker thread
to keep the event loop free. The same code talks to a real server with an ``http(s)://`` DSN.
Errors are translated to ``TransientError`` (server or engine unavailable) here, once; an
embedded engine another process holds is ``CLICKHOUSE_BUSY`` (:func:`embedded_holder`).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import clickhouse_connect
import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, ProgrammingError

from streams.embedded import require_wheel
from streams.errors import TransientError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CLIENTS: dict[str, Client] = {}
_CLIENTS_LOCK = threading.Lock()
_CALLING = threading.local()  # .active: this thread is inside ClickHouse._run


class _RaisedInstead(logging.Filter):
    """Drops the HTTP driver's own warnings (urllib3's "Retrying…", clickhouse-connect's
    "Unexpected Http Driver Exception") about a request :class:`ClickHouse` made: that failure
    is raised, translated here and reported by the caller once per outage
    (``streams.adapters.outage``); logged per request too, a ClickHouse server that was down
    wrote two warnings for every insert attempt. Their other logging is left alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or not getattr(_CALLING, "active", False)


for _name in ("urllib3.connectionpool", "clickhouse_connect.driver._backend.http_sync"):
    logging.getLogger(_name).addFilter(_RaisedInstead())


def _client_for(dsn: str) -> Client:
    # chDB refuses a second engine path in one process, so clients are shared per DSN.
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(dsn)
        if client is None:
            if embedded_path(dsn) is not None:  # clickhouse-connect's own hint names its extra
                require_wheel(
                    "chdb", wheel="chdb", service="ClickHouse", setting="TIDEWAY_CLICKHOUSE_DSN"
                )
                # Not even tried while another process holds the engine: chDB would print
                # its own "Code: 76 ... Cannot lock file" line to the terminal before failing.
                # Nothing in this process has opened it yet (no client), so the probe holds.
                busy = _busy_error(dsn)
                if busy is not None:
                    raise busy
            client = clickhouse_connect.get_client(dsn=dsn)
            _CLIENTS[dsn] = client
        return client


def embedded_holder(dsn: str) -> int | None:
    """The process holding the chDB data directory of ``dsn``, if another one does.

    chDB runs ClickHouse in-process; like a server, the engine takes an exclusive ``flock`` on
    ``<path>/status`` (which holds ``PID: n``) for as long as it is open, and a second process
    that opens the same path fails with a generic "Error initializing EmbeddedServer"
    (``BAD_ARGUMENTS``). Probing that lock tells "held by another process" apart from other
    failures to open. Only meaningful when this process has not opened the path itself (a lock
    is per open file, so our own engine would look like a holder): call it after opening
    failed. Returns the PID (0 if the file does not say), or ``None`` if nobody holds it.
    """
    path = embedded_path(dsn)
    if path is None:
        return None
    try:
        fd = os.open(path / "status", os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 4096).decode("utf-8", "replace")
            match = re.search(r"^PID:\s*(\d+)", text, re.MULTILINE)
            return int(match.group(1)) if match else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def embedded_path(dsn: str) -> Path | None:
    """The data directory of an embedded ClickHouse (``chdb://<path>``); ``None`` for a server."""
    parts = urlsplit(dsn)
    if parts.scheme != "chdb":
        return None
    return Path(parts.netloc + parts.path)


def _busy_error(dsn: str) -> TransientError | None:
    """``CLICKHOUSE_BUSY`` naming the fix, when another process holds ``dsn``'s engine."""
    pid = embedded_holder(dsn)
    if pid is None:
        return None
    holder = f"process {pid}" if pid else "another process"
    return TransientError(
        f"the embedded ClickHouse (chDB) at {embedded_path(dsn)} is held by {holder} (a `tideway"
        " up`, `tideway ingest` or `tideway worker` using it), and chDB lets only one process"
        " open it: stop that process and run this command again, or set"
        " TIDEWAY_CLICKHOUSE_DSN to a ClickHouse server that every process can share",
        code="CLICKHOUSE_BUSY",
    )


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
                _CALLING.active = True
                try:
                    return fn(_client_for(self.dsn), *args, **kwargs)
                except ClickHouseError as exc:
                    busy = (_busy_error(self.dsn) if isinstance(exc, ProgrammingError)
                            and "open the chdb engine" in str(exc) else None)
                    if busy is not None:
                        raise busy from exc
                    raise TransientError(f"ClickHouse: {exc}", code="CLICKHOUSE_ERROR") from exc
                except OSError as exc:
                    raise TransientError(
                        f"ClickHouse unavailable: {exc}", code="CLICKHOUSE_UNAVAILABLE"
                    ) from exc
                finally:
                    _CALLING.active = False

        return await asyncio.to_thread(call)

    @property
    def embedded(self) -> bool:
        """Whether the engine runs in this process (chDB), so it reads this machine's files."""
        return embedded_path(self.dsn) is not None

    async def check(self) -> None:
        """Open the engine (or reach the server) now, so that a command can refuse before it
        changes anything; raises the translated error (``CLICKHOUSE_BUSY``: see
        :func:`embedded_holder`)."""
        await self.query_rows("SELECT 1")

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
