"""Tideway behind a real PgBouncer in transaction mode (Debian's 1.18: no prepared-statement
support, so the statement cache is turned off with ``postgres_statement_cache_size = 0``).

The ingest consumer records envelopes through it and a run goes through the worker through
it. LISTEN does not survive transaction pooling (the LISTEN lands on whichever server
connection the transaction got, and that connection goes back to the pool), so the worker's
wake-ups are lost there and it finds the jobs by its poll (``worker.poll_interval_s``).
"""

from __future__ import annotations

import asyncio

import asyncpg

from stages.jobs.dag import DEFAULT_DAG
from streams import migrate
from streams.adapters import postgres
from streams.config import Settings
from streams.jobs import queue
from streams.jobs.executor import placeholder_executors
from tests.integration.ingest.conftest import Harness, good_values
from tests.integration.jobs.conftest import Owner, job_states, start_run
from tests.integration.jobs.helpers import fast_settings, wait_run, workers
from tests.integration.postgres_scale.conftest import PgBouncer, through


async def test_the_statement_cache_size_setting_reaches_every_connection(
    settings: Settings,
) -> None:
    # asyncpg keeps named prepared statements (pg_prepared_statements) only with a cache.
    named = "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE '__asyncpg_stmt_%'"
    assert settings.postgres() == settings.postgres_dsn.get_secret_value()  # type: ignore[union-attr]
    conn = await postgres.connect(settings.postgres())
    try:
        await conn.fetchval("SELECT $1::int", 1)
        assert await conn.fetchval(named) > 0
    finally:
        await conn.close()
    tuned = settings.model_copy(update={"postgres_statement_cache_size": 0})
    assert "statement_cache_size=0" in tuned.postgres()
    # `tideway migrate` (psycopg, which refuses unknown options) takes the DSN as it is.
    assert await asyncio.to_thread(migrate.current, tuned.postgres()) is not None
    conn = await postgres.connect(tuned.postgres())
    try:
        await conn.fetchval("SELECT $1::int", 1)
        assert await conn.fetchval(named) == 0
    finally:
        await conn.close()
    pool = await postgres.create_pool(tuned.postgres(), postgres.streaming_pool(1))
    try:
        async with pool.acquire() as pooled:
            await pooled.fetchval("SELECT $1::int", 1)
            assert await pooled.fetchval(named) == 0
            # The DSN's other parts and the pool's session settings are untouched.
            assert await pooled.fetchval("SELECT current_setting('plan_cache_mode')") == (
                "force_custom_plan"
            )
    finally:
        await pool.close()


async def test_ingest_records_envelopes_through_pgbouncer(
    fleet: Harness, pgbouncer: PgBouncer
) -> None:
    settings = through(fleet.settings, pgbouncer)
    for i in range(200):
        await fleet.publish(f"d{1 + i % 2}", {"ts": i, "values": good_values()}, msg_id=f"b-{i}")
    await fleet.consume(200, within=60, settings=settings)
    assert await fleet.count(
        "SELECT count(*) FROM ingestion_messages WHERE status = 'completed'") == 200
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 200
    assert "new connection to server" in pgbouncer.log.read_text()  # it did go through
    # ...at the first try: no batch failed on the way and was redelivered.
    info = await fleet.nc.jetstream().consumer_info(fleet.names.telemetry_stream,
                                                    fleet.names.ingest_durable)
    assert info.delivered.consumer_seq == 200


async def test_prepared_statements_break_behind_pgbouncer_1_18_without_the_setting(
    fleet: Harness, pgbouncer: PgBouncer
) -> None:
    # Why the setting exists: with asyncpg's named prepared statements, a statement prepared
    # in one transaction is looked up on another server connection in the next.
    settings = through(fleet.settings, pgbouncer, cache=postgres.STATEMENT_CACHE)
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=4))
    failures: list[BaseException] = []

    async def query(i: int) -> None:
        try:
            async with pool.acquire() as conn:
                await conn.fetchval("SELECT $1::int + count(*) FROM devices", i)
        except asyncpg.PostgresError as exc:
            failures.append(exc)

    try:
        for _ in range(10):
            await asyncio.gather(*(query(i) for i in range(8)))
    finally:
        await pool.close()
    assert failures, "expected prepared-statement errors through transaction pooling"


async def test_a_run_goes_through_the_worker_through_pgbouncer(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, pgbouncer: PgBouncer
) -> None:
    run_id = await start_run(conn, owner, channel=queue.jobs_channel(settings))
    bounced = fast_settings(through(settings, pgbouncer), poll_interval_s=0.2)
    async with workers(bounced, placeholder_executors(DEFAULT_DAG)):
        assert await wait_run(conn, run_id, within_s=60) == "succeeded"
    assert set((await job_states(conn, run_id)).values()) == {"succeeded"}
    attempts = await conn.fetch("SELECT status FROM job_attempts")
    assert {r["status"] for r in attempts} == {"succeeded"}  # no attempt failed on the way
    assert len(attempts) == len(await job_states(conn, run_id))


async def test_notify_does_not_reach_a_listener_through_transaction_pooling(
    settings: Settings, pgbouncer: PgBouncer
) -> None:
    poll_s = 0.5
    # What the worker's LISTEN connection gets through PgBouncer: nothing. Its jobs are found
    # by the poll instead (docs/deploy.md: point the workers at Postgres directly, or accept
    # up to worker.poll_interval_s of extra latency per job).
    channel = "tw_pgb_probe"
    bounced = through(settings, pgbouncer).postgres()
    listener = await postgres.connect(bounced)
    got: list[str] = []
    await listener.add_listener(channel, lambda *args: got.append(args[3]))
    sender = await postgres.connect(settings.postgres())
    try:
        for i in range(5):
            await sender.execute("SELECT pg_notify($1, $2)", channel, str(i))
        await asyncio.sleep(poll_s)
        await listener.execute("SELECT 1")  # give PgBouncer a chance to forward anything
        await asyncio.sleep(poll_s)
    finally:
        await sender.close()
        await listener.close()
    assert got == []
