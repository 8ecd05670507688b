"""Attempt history as spec 004 and spec 000 §6 describe it (issue 15 item 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from stages.jobs.errors import ErrorSource, describe
from streams.jobs import queue
from streams.jobs.model import ClaimedJob, JobResult
from tests.integration.jobs.conftest import CH, Owner, start_run

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def _claim(conn: asyncpg.Connection, seconds: float) -> list[ClaimedJob]:
    return await queue.claim(
        conn, worker_id="w1", limit=1, tenant_max_running=8, heavy_max_running=8, now=at(seconds)
    )


async def test_an_attempt_is_recorded_while_it_runs_and_its_retry_when_scheduled(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    await start_run(conn, owner, dag={"parse": JobSpec(name="parse", job_type="parse_raw")})
    [job] = await _claim(conn, 0)
    running = await conn.fetchrow(
        "SELECT attempt_number, status, step_type, worker_id, started_at, ended_at "
        "FROM job_attempts WHERE job_id = $1",
        job.id,
    )
    assert tuple(running) == (1, "running", "parse_raw", "w1", at(0), None)

    transient = describe("TRANSIENT", "store away", retriable=True, source=ErrorSource.STORAGE)
    failed = await queue.fail(conn, job, transient, schedule=(30.0,), u=0.0, now=at(5),
                              channel=CH, dag=DEFAULT_DAG)  # fmt: skip
    assert failed.state == "retry_wait" and failed.next_run_at == at(35)
    ended = await conn.fetchrow(
        "SELECT status, error_sub_type, error_message, ended_at, retry_at FROM job_attempts"
        " WHERE job_id = $1",
        job.id,
    )
    assert tuple(ended) == ("failed", "TRANSIENT", "store away", at(5), at(35))

    await queue.promote(conn, now=at(35), channel=CH)
    [again] = await _claim(conn, 35)
    await queue.complete(conn, again, JobResult(), now=at(36), channel=CH, dag=DEFAULT_DAG)
    rows = await conn.fetch(
        "SELECT attempt_number, status, step_type, error_message, ended_at, retry_at"
        " FROM job_attempts ORDER BY attempt_number"
    )
    assert [tuple(r) for r in rows] == [
        (1, "failed", "parse_raw", "store away", at(5), at(35)),
        (2, "succeeded", "parse_raw", None, at(36), None),
    ]
    # The job records when it first started (spec 004): the retry's claim did not move it.
    assert await conn.fetchval("SELECT started_at FROM jobs WHERE id = $1", job.id) == at(0)


async def test_a_users_cancel_is_recorded_as_the_operators(
    conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner, dag={"long": JobSpec(name="long")})
    [job] = await _claim(conn, 0)
    summary = await queue.cancel_run(conn, run_id, now=at(1), dag=DEFAULT_DAG)
    assert summary.requested == 1
    ack = await queue.acknowledge_cancel(conn, job, now=at(2), channel=CH, dag=DEFAULT_DAG)
    assert ack.state == "cancelled"
    row = await conn.fetchrow(
        "SELECT status, error_sub_type, error_source FROM job_attempts WHERE job_id = $1", job.id
    )
    assert tuple(row) == ("cancelled", "CANCELLED", "operator")
