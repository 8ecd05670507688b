"""The worker runs whole runs: chaining, retries, soft timeouts, cancellation, NOTIFY."""

from __future__ import annotations

import asyncpg

from streams.config import Settings
from streams.jobs.executor import placeholder_executors
from tests.integration.jobs.conftest import Owner, job_states, start_run
from tests.integration.jobs.helpers import fast_settings, wait_run, workers


async def test_a_worker_runs_the_default_dag_to_success(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner)
    async with workers(fast_settings(settings), placeholder_executors()):
        assert await wait_run(conn, run_id) == "succeeded"
    assert set((await job_states(conn, run_id)).values()) == {"succeeded"}
    session = await conn.fetchrow("SELECT * FROM sessions WHERE id = $1", owner.session_id)
    assert session["active_run_id"] == run_id and session["query_ready"]
