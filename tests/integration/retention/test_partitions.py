"""Partition maintenance and retention on a real Postgres: partitions made ahead, rows routed
to them (or to DEFAULT), exactly the expired partitions dropped, open dead letters kept."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from stages.ingest.ingress import key_hash
from streams.config import RetentionSettings, Settings
from streams.retention import maintain
from streams.retention.plan import DELETE, DROP, KEEP

DAY = timedelta(days=1)
T0 = datetime(2030, 3, 10, 12, 0, tzinfo=UTC)  # far from the real clock: no overlap with it


def _settings(settings: Settings, **retention: float) -> Settings:
    return settings.model_copy(update={"retention": RetentionSettings(**retention)})


async def _where(conn: asyncpg.Connection, table: str, column: str, value: object) -> str:
    return str(
        await conn.fetchval(
            f"SELECT tableoid::regclass::text FROM {table} WHERE {column} = $1", value
        )
    )


async def _message(
    conn: asyncpg.Connection,
    received_at: datetime,
    status: str = "completed",
) -> int:
    return int(
        await conn.fetchval(
            "INSERT INTO ingestion_messages (source_deduplication_key, stream_seq, received_at,"
            " subject, payload_bytes, status) VALUES ($1, 1, $2, 's', 1, $3) RETURNING id",
            uuid.UUID(key_hash(f"k-{received_at.isoformat()}-{status}")),  # a key's digest
            received_at,
            status,
        )
    )


async def _partitions(conn: asyncpg.Connection, table: str) -> list[str]:
    return sorted(
        r["name"]
        for r in await conn.fetch(
            "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = $1::regclass",
            table,
        )
    )


async def test_maintenance_makes_partitions_ahead_and_rows_land_in_them(
    settings: Settings,
    pg_pool: asyncpg.Pool,
) -> None:
    s = _settings(settings, partitions_ahead=2)
    async with pg_pool.acquire() as conn:
        stray = await _message(conn, T0 + 1 * DAY)  # no partition yet: DEFAULT holds it
        assert await _where(conn, "ingestion_messages", "id", stray) == "ingestion_messages_default"
    done = await maintain.maintain_once(pg_pool, s, now=T0)
    assert done is not None
    for table in ("ingestion_messages", "ingestion_stage_passes", "device_telemetry_logs"):
        assert [n for n in done.created if n.startswith(table + "_p")] == [
            f"{table}_p20300310",
            f"{table}_p20300311",
            f"{table}_p20300312",
        ]
    assert "ingest_dedupe_keys_g2" in done.created  # the next generation, ready
    async with pg_pool.acquire() as conn:
        # The stray row moved out of DEFAULT into the partition made for its day.
        assert (
            await _where(conn, "ingestion_messages", "id", stray) == "ingestion_messages_p20300311"
        )
        assert (
            await _where(conn, "ingestion_messages", "id", await _message(conn, T0 + 2 * DAY))
            == "ingestion_messages_p20300312"
        )
        assert (
            await _where(conn, "ingestion_messages", "id", await _message(conn, T0 + 9 * DAY))
            == "ingestion_messages_default"
        )
        old = await _message(conn, T0 - 400 * DAY)
        assert await _where(conn, "ingestion_messages", "id", old) == "ingestion_messages_default"
    again = await maintain.maintain_once(pg_pool, s, now=T0)
    # Round 1 started generation 2 (the clock moved to T0), so only generation 3 is new; the
    # row older than every partition and past its retention is deleted from DEFAULT.
    assert again is not None and again.created == ["ingest_dedupe_keys_g3"]
    assert [(i.target, i.action, i.rows) for i in again.done] == [
        ("ingestion_messages_default", DELETE, 1)
    ]
    async with pg_pool.acquire() as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM ingestion_messages WHERE id = $1", old) == 0
        )


async def test_only_one_process_leads_a_round(settings: Settings, pg_pool: asyncpg.Pool) -> None:
    async with pg_pool.acquire() as leader:
        assert await leader.fetchval(
            "SELECT pg_try_advisory_lock($1)", maintain.sql.MAINTENANCE_LOCK_KEY
        )
        try:
            assert await maintain.maintain_once(pg_pool, settings, now=T0) is None
        finally:
            await leader.execute("SELECT pg_advisory_unlock($1)", maintain.sql.MAINTENANCE_LOCK_KEY)
    assert await maintain.maintain_once(pg_pool, settings, now=T0) is not None


async def test_retention_drops_exactly_the_expired_partitions_and_keeps_open_dead_letters(
    settings: Settings,
    pg_pool: asyncpg.Pool,
) -> None:
    s = _settings(
        settings,
        partitions_ahead=1,
        stage_logs_s=2 * DAY.total_seconds(),
        ingestion_records_s=3 * DAY.total_seconds(),
        telemetry_logs_s=4 * DAY.total_seconds(),
        dedupe_keys_s=settings.stream.max_age_s,
        resolved_dead_letters_s=DAY.total_seconds(),
    )
    async with pg_pool.acquire() as conn:
        for day in range(6):  # one partition per table for each of the days 0 to 6
            await maintain.ensure_ahead(conn, s, T0 + day * DAY)
        ids = [await _message(conn, T0 + day * DAY) for day in range(6)]
        dead_open = await _message(conn, T0 + 1 * DAY, status="failed_terminal")
        dead_resolved = await _message(conn, T0 + 1 * DAY, status="failed_validation")
        for message_id, state in ((dead_open, "open"), (dead_resolved, "resolved")):
            await conn.execute(
                "INSERT INTO dead_letters (ingestion_message_id, subject, payload, reason_code,"
                " failures, state, resolution, resolved_at) VALUES ($1, 's', '', 'X', '[]',"
                " $2, $3, $4)",
                message_id,
                state,
                "operator" if state == "resolved" else None,
                T0 if state == "resolved" else None,
            )
        for day, message_id in enumerate(ids):
            await conn.execute(
                "INSERT INTO ingestion_stage_passes (message_ids, message_id_min,"
                " message_id_max, attempt, stages, failed, durations, created_at)"
                " VALUES (ARRAY[$1::bigint], $1, $1, 1, '{1}', '{0}', '{1,0,0,0,0,0}', $2)",
                message_id,
                T0 + day * DAY,
            )
        await conn.execute(
            "INSERT INTO device_telemetry_logs (ingestion_message_id, device_id, measured_at,"
            " received_at, processing_state, values_layout, parameter_list)"
            " SELECT id, gen_random_uuid(), received_at, received_at,"
            # As the pipeline writes them: a failed_terminal envelope with telemetry is a
            # publish that failed, and its dead letter stays open until a redrive publishes it.
            " CASE status WHEN 'failed_terminal' THEN 'publish_failed'"
            " WHEN 'failed_validation' THEN 'invalid' ELSE 'processed' END"
            "::telemetry_processing_state, 1, '[]'"
            " FROM ingestion_messages"
        )
        before = {
            t: await _partitions(conn, t)
            for t in ("ingestion_messages", "ingestion_stage_passes", "device_telemetry_logs")
        }

    now = T0 + 6 * DAY + timedelta(hours=1)  # day 5's partition ends at T0 + 6 days (noon)
    async with pg_pool.acquire() as conn:
        planned = await maintain.current_plan(conn, s, now)
    drops = sorted(i.target for i in planned if i.action == DROP and i.tier != "dedupe_keys")
    # [lo, hi) expires at hi + retention: stage logs (2 d) up to day 3, messages (3 d) up to
    # day 2, telemetry (4 d) up to day 1. (Buckets are UTC days: T0 is noon of 2030-03-10.)
    assert drops == sorted(
        [f"ingestion_stage_passes_p203003{d}" for d in (10, 11, 12, 13)]
        + [f"ingestion_messages_p203003{d}" for d in (10, 11, 12)]
        + [f"device_telemetry_logs_p203003{d}" for d in (10, 11)]
    )
    assert [i.rows for i in planned if i.tier == "dead_letters" and i.action == DELETE] == [1]

    async with pg_pool.acquire() as conn:  # a dry run changes nothing
        dry = await maintain.maintain_once(pg_pool, s, now=now, dry_run=True)
        assert dry is not None and {i.target for i in dry.done} >= set(drops)
        assert await _partitions(conn, "ingestion_messages") == before["ingestion_messages"]

    done = await maintain.maintain_once(pg_pool, s, now=now)
    assert done is not None and done.skipped == []
    async with pg_pool.acquire() as conn:
        for table, parts in before.items():
            left = set(await _partitions(conn, table))
            assert not left & set(drops), table  # the expired ones are gone...
            assert set(parts) - set(drops) <= left, table  # ...and nothing else is
        kept = set(await conn.fetchval("SELECT array_agg(id) FROM ingestion_messages")) - {
            dead_open
        }
        assert kept == set(ids[3:])  # days 3, 4, 5 (day 2's hi + 3 d <= now)
        # The open dead letter's message and telemetry survive, in DEFAULT now.
        assert (
            await _where(conn, "ingestion_messages", "id", dead_open)
            == "ingestion_messages_default"
        )
        assert (
            await _where(conn, "device_telemetry_logs", "ingestion_message_id", dead_open)
            == "device_telemetry_logs_default"
        )
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 1
        # Nothing was deleted row by row from a live partition: what is left is whole.
        assert await conn.fetchval("SELECT count(*) FROM ingestion_stage_passes") == 2


async def test_a_dedupe_generation_is_forgotten_only_after_the_horizon(
    settings: Settings,
    pg_pool: asyncpg.Pool,
) -> None:
    horizon = settings.stream.max_age_s
    s = _settings(settings, partitions_ahead=1, dedupe_keys_s=horizon)
    real_now = datetime.now(UTC)
    first = await maintain.maintain_once(pg_pool, s, now=real_now)
    assert first is not None and first.generation is None  # generation 1 is the current one
    # The default generation (4 days) later, the next one begins.
    nxt = await maintain.maintain_once(
        pg_pool, s, now=real_now + timedelta(seconds=s.retention.dedupe_generation_s)
    )
    assert nxt is not None and nxt.generation == 2
    async with pg_pool.acquire() as conn:
        started = await conn.fetchval(
            "SELECT started_at FROM ingest_dedupe_generations WHERE gen = 2"
        )
        items = {i.target: i for i in await maintain.current_plan(conn, s, real_now)}
    assert items["ingest_dedupe_keys_g1"].expires_at == started + timedelta(seconds=horizon)
    assert items["ingest_dedupe_keys_g2"].expires_at is None  # the current one
    assert items["ingest_dedupe_keys_g1"].action == KEEP
    later = started + timedelta(seconds=horizon + 1)
    done = await maintain.maintain_once(pg_pool, s, now=later)
    assert done is not None
    assert [i.target for i in done.done if i.tier == "dedupe_keys"] == ["ingest_dedupe_keys_g1"]
    async with pg_pool.acquire() as conn:
        assert [
            r["gen"]
            for r in await conn.fetch("SELECT gen FROM ingest_dedupe_generations ORDER BY gen")
        ] == [2, 3]


async def test_a_round_summarizes_the_brin_indexes_of_the_partitions_still_written(
    settings: Settings, pg_pool: asyncpg.Pool
) -> None:
    """Telemetry is found by message id and by arrival through BRIN indexes (migration 0020),
    which read every page added since their last summary: the round summarizes today's (and
    yesterday's) partitions, not the older ones."""
    s = _settings(settings, partitions_ahead=1, telemetry_logs_s=30 * 86400)
    assert await maintain.maintain_once(pg_pool, s, now=T0 - DAY) is not None
    assert await maintain.maintain_once(pg_pool, s, now=T0) is not None
    rows = """
        INSERT INTO device_telemetry_logs (ingestion_message_id, device_id, measured_at,
            received_at, processing_state, values_layout, parameter_list)
        SELECT g, gen_random_uuid(), $1::timestamptz, $1::timestamptz + (g - $2) * interval '1 ms',
               'processed', 1,
               '[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]'
        FROM generate_series($2::bigint, $2 + 19999) g
    """
    async with pg_pool.acquire() as conn:
        await conn.execute(rows, T0 - 5 * DAY, 1)  # an old day (DEFAULT: no partition)
        await conn.execute(rows, T0, 100_000)  # today's partition
        old_default = "device_telemetry_logs_default"
        today = "device_telemetry_logs_p20300310"
        assert await _where(conn, "device_telemetry_logs", "ingestion_message_id", 1) == old_default
    done = await maintain.maintain_once(pg_pool, s, now=T0 + timedelta(hours=1))
    assert done is not None and done.summarized > 0
    async with pg_pool.acquire() as conn:
        for partition in (today, old_default):
            indexes = [r["index"] for r in await conn.fetch(
                "SELECT i.indexrelid::regclass::text AS index FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam"
                " WHERE am.amname = 'brin' AND i.indrelid = $1::regclass", partition)]
            assert len(indexes) == 2  # message id, received_at
            for index in indexes:  # nothing left to summarize
                assert await conn.fetchval("SELECT brin_summarize_new_values($1::regclass)",
                                           index) == 0
        # A message id is found by reading its range's pages, not the whole partition.
        await conn.execute(f"ANALYZE {today}")
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM device_telemetry_logs"
            " WHERE ingestion_message_id = 110000 AND received_at = $1",
            T0 + timedelta(milliseconds=10_000)))
    assert "ix_device_telemetry_logs_message_id" in plan or "message_id_idx" in plan, plan
    heap_blocks = [int(x.split("=")[1]) for line in plan.splitlines() if "Heap Blocks" in line
                   for x in line.split() if x.startswith("lossy=") or x.startswith("exact=")]
    assert heap_blocks and sum(heap_blocks) <= 32, plan
