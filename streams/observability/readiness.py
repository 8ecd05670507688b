"""Readiness checks: does each service this process needs answer right now?

A check is a named async callable that returns when its service answers and raises when it
does not. The factories below each wrap a client the process already holds (a pool, a
connection), so a check costs one round trip and opens nothing. :func:`run_checks` runs a
process's checks concurrently, each with its own timeout, and reports every failure by name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streams.adapters.nats import Nats
from streams.adapters.postgres import Pool


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One dependency to check: ``probe`` returns when it answers, raises when not."""

    name: str
    probe: Callable[[], Awaitable[None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    name: str
    ok: bool
    reason: str = ""
    """Why it failed (the error's class and message); empty when it passed."""


async def run_checks(checks: Sequence[Check], *, timeout_s: float) -> tuple[CheckResult, ...]:
    """Run every check concurrently, each given ``timeout_s``; results in ``checks`` order."""
    return tuple(await asyncio.gather(*(_run(c, timeout_s) for c in checks)))


async def _run(check: Check, timeout_s: float) -> CheckResult:
    try:
        await asyncio.wait_for(check.probe(), timeout_s)
    except TimeoutError:
        return CheckResult(name=check.name, ok=False, reason=f"no answer within {timeout_s:g} s")
    except Exception as exc:  # any failure means "not ready"; the reason says which
        return CheckResult(name=check.name, ok=False, reason=f"{type(exc).__name__}: {exc}")
    return CheckResult(name=check.name, ok=True)


# -- factories ------------------------------------------------------------------------------


def postgres_check(pool: Pool, *, name: str = "postgres") -> Check:
    """``SELECT 1`` on a connection from ``pool``."""

    async def probe() -> None:
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1")

    return Check(name=name, probe=probe)


class _Pings(Protocol):
    def ping(self) -> Awaitable[Any]: ...


def redis_check(client: _Pings, *, name: str = "redis") -> Check:
    """``PING`` on a ``redis.asyncio`` client."""

    async def probe() -> None:
        await client.ping()

    return Check(name=name, probe=probe)


def nats_check(nc: Nats, *, stream: str, durable: str, name: str = "nats") -> Check:
    """NATS connected, and JetStream knows the durable consumer ``durable`` on ``stream``."""

    async def probe() -> None:
        if not nc.is_connected:
            raise ConnectionError("not connected to NATS")
        await nc.jetstream().consumer_info(stream, durable)

    return Check(name=name, probe=probe)


def nats_connected_check(nc: Nats, *, name: str = "nats") -> Check:
    """NATS connected, and the server answers a round trip (a process with no consumer)."""

    async def probe() -> None:
        if not nc.is_connected:
            raise ConnectionError("not connected to NATS")
        await nc.flush(timeout=2)

    return Check(name=name, probe=probe)


class _Queries(Protocol):
    def query_rows(self, sql: str) -> Awaitable[Any]: ...


def clickhouse_check(clickhouse: _Queries, *, name: str = "clickhouse") -> Check:
    """``SELECT 1`` through Tideway's ClickHouse facade (anything with ``query_rows``)."""

    async def probe() -> None:
        await clickhouse.query_rows("SELECT 1")

    return Check(name=name, probe=probe)


class _Stats(Protocol):
    def exists(self, key: str) -> bool: ...


PROBE_KEY = "readyz-probe"
"""The key the object-store check stats: it need not exist; the store must answer."""


def object_store_check(store: _Stats, *, name: str = "object_store") -> Check:
    """A stat of one key under the store's root (run in a thread: pyarrow.fs blocks)."""

    async def probe() -> None:
        await asyncio.to_thread(store.exists, PROBE_KEY)

    return Check(name=name, probe=probe)
