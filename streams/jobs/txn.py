"""Transactions for the job engine: retried on deadlock, with database refusals translated.

Statements of different transactions touch job rows, their dependents and the run row in
slightly different orders (a completion locks its job, then the run, then dependents; a run
cancellation locks jobs of the whole run). Postgres detects the rare deadlock this allows and
aborts one side; the aborted transaction is simply run again, which is safe because every
statement in it is guarded by the state it expects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from stages.transitions import IllegalTransition
from streams.adapters.errors import PG_CONFLICTS, PgCheckViolation, pg_conflict
from streams.adapters.postgres import Conn

T = TypeVar("T")

_TRIES = 6


# BEGIN and the transaction's settings travel in one message (the simple protocol carries
# several statements when there are no parameters). The engine's statements are keyed lookups
# whose best plan does not depend on the values: generic plans save planning them again on
# every execution (about a millisecond each for CLAIM and COMPLETE), and without bitmap scans
# the planner cannot choose to read every running job through a partial index because the
# jobs table's statistics lag behind its churn.
BEGIN: Final = (
    "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; "
    "SET LOCAL enable_bitmapscan = off"
)


def on_conflict() -> AsyncRetrying:
    """The retry policy for a transaction Postgres aborted on a deadlock or serialisation
    conflict: up to six tries, a few milliseconds apart with jitter (the other side has
    usually committed by then), the conflict re-raised when they are spent."""
    return AsyncRetrying(
        retry=retry_if_exception_type(PG_CONFLICTS),
        stop=stop_after_attempt(_TRIES),
        wait=wait_random_exponential(multiplier=0.002, max=0.05),
        reraise=True,
    )


async def atomically(conn: Conn, work: Callable[[Conn], Awaitable[T]]) -> T:
    """Run ``work(conn)`` in a transaction (a savepoint when one is already open)."""
    try:
        if conn.is_in_transaction():
            async with conn.transaction():
                return await work(conn)
        async for attempt in on_conflict():
            with attempt:
                await conn.execute(BEGIN)
                try:
                    result = await work(conn)
                    await conn.execute("COMMIT")
                except BaseException:
                    await rollback_quietly(conn)
                    raise
        return result
    except PG_CONFLICTS as exc:
        raise pg_conflict(exc, what="job engine transaction") from exc
    except PgCheckViolation as exc:
        raise _translated(exc) from exc


async def rollback_quietly(conn: Conn) -> None:
    """Roll back an open transaction while another exception propagates.

    Errors here are swallowed on purpose: the caller re-raises the original one, and a
    connection left unusable (a query cancelled midway) is reset or discarded by its pool.
    """
    if not conn.is_closed() and conn.is_in_transaction():
        with contextlib.suppress(Exception):
            await conn.execute("ROLLBACK")


def _translated(exc: PgCheckViolation) -> Exception:
    if (exc.constraint_name or "").startswith("tideway_"):
        # Postgres's triggers guard the same tables as stages' machines: the same error,
        # with the code that says the database refused it (ILLEGAL_TRANSITION).
        return IllegalTransition(str(exc))
    return exc
