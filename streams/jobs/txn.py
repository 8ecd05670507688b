"""Transactions for the job engine: retried on deadlock, with database refusals translated.

Statements of different transactions touch job rows, their dependents and the run row in
slightly different orders (a completion locks its job, then the run, then dependents; a run
cancellation locks jobs of the whole run). Postgres detects the rare deadlock this allows and
aborts one side; the aborted transaction is simply run again, which is safe because every
statement in it is guarded by the state it expects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import asyncpg
import asyncpg.pool

from streams.errors import PermanentError, TransientError

T = TypeVar("T")

Conn: TypeAlias = "asyncpg.Connection[Any] | asyncpg.pool.PoolConnectionProxy[Any]"
"""A connection made by ``streams.db`` or acquired from its pool."""

_RETRYABLE = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)
_TRIES = 6


class IllegalTransitionError(PermanentError):
    """Postgres refused a state change that the transition tables do not allow."""

    code = "ILLEGAL_TRANSITION"


async def atomically(conn: Conn, work: Callable[[Conn], Awaitable[T]]) -> T:
    """Run ``work(conn)`` in a transaction (a savepoint when one is already open)."""
    nested = conn.is_in_transaction()
    for attempt in range(1, _TRIES + 1):
        try:
            async with conn.transaction():
                return await work(conn)
        except _RETRYABLE as exc:
            if nested or attempt == _TRIES:
                raise TransientError(
                    f"job engine transaction aborted: {exc}", code="PG_CONFLICT"
                ) from exc
            await asyncio.sleep(0.002 * attempt)
        except asyncpg.exceptions.CheckViolationError as exc:
            if (exc.constraint_name or "").startswith("tideway_"):
                raise IllegalTransitionError(str(exc)) from exc
            raise
    raise AssertionError("unreachable")
