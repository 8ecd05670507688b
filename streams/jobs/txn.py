"""Transactions for the job engine: retried on deadlock, with database refusals translated.

Statements of different transactions touch job rows, their dependents and the run row in
slightly different orders (a completion locks its job, then the run, then dependents; a run
cancellation locks jobs of the whole run). Postgres detects the rare deadlock this allows and
aborts one side; the aborted transaction is simply run again, which is safe because every
statement in it is guarded by the state it expects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import asyncpg

from stages.transitions import IllegalTransition
from streams.adapters.postgres import Conn
from streams.errors import TransientError

T = TypeVar("T")

_RETRYABLE = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)
_TRIES = 6


# BEGIN and the transaction's settings travel in one message (the simple protocol carries
# several statements when there are no parameters). The engine's statements are keyed lookups
# whose best plan does not depend on the values: generic plans save planning them again on
# every execution (about a millisecond each for CLAIM and COMPLETE), and without bitmap scans
# the planner cannot choose to read every running job through a partial index because the
# jobs table's statistics lag behind its churn.
BEGIN: Final = (
    "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_bitmapscan = off"
)


async def atomically(conn: Conn, work: Callable[[Conn], Awaitable[T]]) -> T:
    """Run ``work(conn)`` in a transaction (a savepoint when one is already open)."""
    if conn.is_in_transaction():
        try:
            async with conn.transaction():
                return await work(conn)
        except _RETRYABLE as exc:
            raise TransientError(
                f"job engine transaction aborted: {exc}", code="PG_CONFLICT"
            ) from exc
        except asyncpg.exceptions.CheckViolationError as exc:
            raise _translated(exc) from exc
    for attempt in range(1, _TRIES + 1):
        await conn.execute(BEGIN)
        try:
            result = await work(conn)
            await conn.execute("COMMIT")
            return result
        except _RETRYABLE as exc:
            await rollback_quietly(conn)
            if attempt == _TRIES:
                raise TransientError(
                    f"job engine transaction aborted: {exc}", code="PG_CONFLICT"
                ) from exc
            await asyncio.sleep(0.002 * attempt)
        except asyncpg.exceptions.CheckViolationError as exc:
            await rollback_quietly(conn)
            raise _translated(exc) from exc
        except BaseException:
            await rollback_quietly(conn)
            raise
    raise AssertionError("unreachable")


async def rollback_quietly(conn: Conn) -> None:
    """Roll back an open transaction while another exception propagates.

    Errors here are swallowed on purpose: the caller re-raises the original one, and a
    connection left unusable (a query cancelled midway) is reset or discarded by its pool.
    """
    if not conn.is_closed() and conn.is_in_transaction():
        with contextlib.suppress(Exception):
            await conn.execute("ROLLBACK")


def _translated(exc: asyncpg.exceptions.CheckViolationError) -> Exception:
    if (exc.constraint_name or "").startswith("tideway_"):
        # Postgres's triggers guard the same tables as stages' machines: the same error,
        # with the code that says the database refused it (ILLEGAL_TRANSITION).
        return IllegalTransition(str(exc))
    return exc
