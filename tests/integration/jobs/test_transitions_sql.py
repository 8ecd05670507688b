"""Postgres refuses exactly the transitions the pure tables refuse (trigger from 0003_jobs)."""

from __future__ import annotations

import itertools

import asyncpg
import pytest

from stages.jobs.job_state import JobState, can_transition
from stages.jobs.run_state import RunState
from stages.jobs.run_state import can_transition as run_can_transition
from stages.transitions import IllegalTransition
from streams.jobs.txn import atomically
from tests.integration.jobs.conftest import Owner, start_run


async def _job_in(conn: asyncpg.Connection, run_id: object, owner: Owner, state: str) -> object:
    # Every row satisfies every state's CHECK (lock, retry time, skip reason) so that only the
    # transition trigger can refuse the UPDATE.
    return await conn.fetchval(
        """
        INSERT INTO jobs (run_id, tenant_id, name, job_type, state, pool, critical,
                          max_attempts, attempt_count, soft_timeout_s, hard_timeout_s,
                          locked_by, locked_at, next_run_at, skip_reason)
        VALUES ($1, $2, gen_random_uuid()::text, 'noop', $3, 'cpu', true, 3, 1, 1, 2,
                'w', now(), now(), 'X')
        RETURNING id
        """,
        run_id, owner.tenant_id, state,
    )  # fmt: skip


async def test_every_job_pair_in_sql(conn: asyncpg.Connection, owner: Owner) -> None:
    run_id = await start_run(conn, owner)
    checked = 0
    for current, target in itertools.product(JobState, JobState):
        if current is target:
            continue
        job_id = await _job_in(conn, run_id, owner, current.value)
        try:
            async with conn.transaction():
                await conn.execute("UPDATE jobs SET state = $2 WHERE id = $1", job_id, target)
            accepted = True
        except asyncpg.exceptions.CheckViolationError as exc:
            assert exc.constraint_name == "tideway_jobs_state_guard"
            accepted = False
        assert accepted is can_transition(current, target), (current, target)
        checked += 1
    assert checked == len(JobState) * (len(JobState) - 1)


async def test_every_run_pair_in_sql(conn: asyncpg.Connection, owner: Owner) -> None:
    for current, target in itertools.product(RunState, RunState):
        if current is target:
            continue
        run_id = await start_run(conn, owner)
        await conn.execute("ALTER TABLE processing_runs DISABLE TRIGGER USER")
        await conn.execute("UPDATE processing_runs SET status = $2 WHERE id = $1", run_id, current)
        await conn.execute("ALTER TABLE processing_runs ENABLE TRIGGER USER")
        try:
            async with conn.transaction():
                await conn.execute(
                    "UPDATE processing_runs SET status = $2 WHERE id = $1", run_id, target
                )
            accepted = True
        except asyncpg.exceptions.CheckViolationError as exc:
            assert exc.constraint_name == "tideway_processing_runs_status_guard"
            accepted = False
        assert accepted is run_can_transition(current, target), (current, target)


async def test_refusals_become_illegal_transition_errors(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    job_id = await _job_in(conn, run_id, owner, "succeeded")

    async def rewind(c: asyncpg.Connection) -> None:
        await c.execute("UPDATE jobs SET state = 'running' WHERE id = $1", job_id)

    with pytest.raises(IllegalTransition) as info:
        await atomically(conn, rewind)
    assert info.value.code == "ILLEGAL_TRANSITION"
    assert await conn.fetchval("SELECT state FROM jobs WHERE id = $1", job_id) == "succeeded"


async def test_state_columns_only_accept_known_states(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    with pytest.raises(asyncpg.exceptions.CheckViolationError):
        await _job_in(conn, run_id, owner, "paused")
    with pytest.raises(asyncpg.exceptions.CheckViolationError):
        await conn.execute(
            "INSERT INTO jobs (run_id, tenant_id, name, job_type, state, pool, critical, "
            "max_attempts, soft_timeout_s, hard_timeout_s) "
            "VALUES ($1, $2, 'r', 'noop', 'running', 'cpu', true, 3, 1, 2)",
            run_id, owner.tenant_id,
        )  # running without a lock holder  # fmt: skip
