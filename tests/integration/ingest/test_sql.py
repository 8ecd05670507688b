"""The hot path's SQL against the migrated schema."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime

import asyncpg

from stages.ingest.evaluate import StageLog
from stages.ingest.ingress import key_hash
from stages.ingest.plan import pass_lines
from streams.adapters import postgres
from streams.ingest import sql


async def test_reserve_ids_uses_the_identity_sequence(pg_pool: asyncpg.Pool) -> None:
    async with pg_pool.acquire() as conn:
        sequence = await conn.fetchval(
            "SELECT pg_get_serial_sequence('ingestion_messages', 'id')::regclass::text")
        assert sequence == sql.MESSAGE_ID_SEQUENCE
        first = await conn.fetchval(sql.RESERVE_IDS, 3)
        second = await conn.fetchval(sql.RESERVE_IDS, 2)
    assert len(first) == 3 and len(second) == 2
    assert len(set(first) | set(second)) == 5
    assert min(second) > max(first)


async def test_stage_passes_read_back_through_the_view_one_row_per_stage(
    pg_pool: asyncpg.Pool,
) -> None:
    """Awkward error messages survive the array literal and COPY escaping, and the view gives
    back exactly the stage logs that were written, in order, with their snapshots."""
    nasty = 'quote " backslash \\ tab \t newline \n cr \r nul \x00 brace {} comma , é'
    plain = [StageLog("ingress", "ok", 5), StageLog("validate", "failed", 9,
                                                    "VALIDATION_FAILED", nasty)]
    captured = [StageLog("ingress", "ok", 1, None, None, {"subject": "a\tb"}, None),
                StageLog("validate", "ok", 2, None, None, None, {"issues": None})]
    # Passes of attempt 1 share a row (migration 0019), the attempt-3 pass has its own.
    lines = pass_lines([(1, 1, plain), (3, 1, [StageLog("publish", "ok", 4)])], capture=False)
    lines += pass_lines([(2, 3, captured)], capture=True)
    assert len(lines) == 2
    async with pg_pool.acquire() as conn:
        await conn.copy_to_table(sql.STAGE_PASSES, source=io.BytesIO("".join(lines).encode()),
                                 columns=list(sql.STAGE_PASS_COPY), format="text")
        rows = await conn.fetch(
            "SELECT message_id, attempt, stage, status, duration_us, error_code, error_message,"
            " input_snapshot, output_snapshot FROM ingestion_stage_logs"
            " ORDER BY message_id, created_at")
        assert await conn.fetchval("SELECT count(*) FROM ingestion_stage_passes") == 2
        # One message's logs, as `tideway messages show` reads them (bounded by the row's ids).
        one = await conn.fetch(sql.MESSAGE_STAGE_LOGS, 3)
    assert [tuple(r) for r in rows] == [
        (1, 1, "ingress", "ok", 5, None, None, None, None),
        (1, 1, "validate", "failed", 9, "VALIDATION_FAILED", nasty.replace("\x00", "\\u0000"),
         None, None),
        (2, 3, "ingress", "ok", 1, None, None, {"subject": "a\tb"}, None),
        (2, 3, "validate", "ok", 2, None, None, None, {"issues": None}),
        (3, 1, "publish", "ok", 4, None, None, None, None),
    ]
    assert [(r["attempt"], r["stage"], r["duration_us"]) for r in one] == [(1, "publish", 4)]


def _lookup_args(keys: list[str]) -> tuple[str, str]:
    receipts = [f"{900_000 + i}:{1_700_000_000_000_000 + i}" for i in range(len(keys))]
    return "\n".join(key_hash(k) for k in keys), "\n".join(receipts)


# The digest of key "seen-<g>" in SQL, as stages.ingest.ingress.key_hash computes it.
_SEEN_DIGEST = "encode(substring(sha256(convert_to('seen-' || g, 'UTF8')) FOR 16), 'hex')::uuid"


async def _record_seen(conn: asyncpg.Connection, n: int) -> None:
    """Messages 1..n, owners of keys "seen-1".."seen-n" in dedupe generation 1."""
    await conn.execute(
        "INSERT INTO ingestion_messages (id, source_deduplication_key, stream_seq, received_at,"
        f" subject, payload_bytes, status) SELECT g, {_SEEN_DIGEST}, g,"
        " '2026-01-01'::timestamptz, 's', 10, 'completed' FROM generate_series(1, $1) g", n)
    await conn.execute(
        "INSERT INTO ingest_dedupe_keys (key_hash, gen, message_id, received_at)"
        f" SELECT {_SEEN_DIGEST}, 1, g, '2026-01-01'::timestamptz"
        " FROM generate_series(1, $1) g", n)


def _execute(command: str, args: tuple[str, str]) -> str:
    """``EXECUTE lookup(...)`` with literal arguments (EXECUTE takes no bind parameters); the
    arguments are hex digests and numbers."""
    return f"{command} lookup(" + ", ".join(f"'{a}'" for a in args) + ")"


async def test_the_dedupe_read_stays_fast_when_the_tables_grow_after_a_deployment(
    pg_dsn: str,
) -> None:
    """On a new deployment the consumer's first dedupe reads run against empty tables. After
    five executions Postgres may switch a prepared statement to a generic plan; one chosen
    then joined every key of a batch against a sequential scan, and took 13 s once 50,000
    envelopes were recorded. The consumer's connections plan each execution for its own
    parameters, so the read stays an index lookup: the plan the statement, prepared before
    the tables grew, has after them reads both tables through their indexes only."""
    # One connection: every execution shares its cache. The read runs both through the
    # driver (its answer) and as a named SQL statement (whose plan EXPLAIN EXECUTE shows).
    pool = await postgres.create_pool(pg_dsn, postgres.streaming_pool(1))
    try:
        async with pool.acquire() as conn:
            await conn.execute(f"PREPARE lookup(text, text) AS {sql.LOOKUP}")
            for batch in range(8):  # past the five custom plans
                args = _lookup_args([f"new-{batch}-{i}" for i in range(8000)])
                found = await conn.fetch(sql.LOOKUP, *args)
                assert [r["id"] for r in found] == [None]  # only the generation row
                assert len(await conn.fetch(_execute("EXECUTE", args))) == 1
            await _record_seen(conn, 50_000)
            keys = [f"seen-{i}" for i in range(1, 8000, 2)] + [f"new-{i}" for i in range(4000)]
            rows = await conn.fetch(sql.LOOKUP, *_lookup_args(keys))
            plan = "\n".join(
                r[0] for r in await conn.fetch(_execute("EXPLAIN EXECUTE", _lookup_args(keys))))
    finally:
        await pool.close()
    # The owners' digests of the keys (migration 0020: rows keep no text).
    assert sorted(r["key"].hex for r in rows if r["id"] is not None) == sorted(
        key_hash(k) for k in keys[:4000])
    assert "Index" in plan and "ingest_dedupe_keys" in plan, plan
    assert "Seq Scan" not in plan and "Hash Join" not in plan, plan


async def test_the_dedupe_read_and_claim_probe_per_key_without_statistics(pg_dsn: str) -> None:
    """A partition nobody has analyzed (a new day's; a server without autovacuum) has no
    statistics, and the planner then expects a batch's keys to match every row: written as
    joins, the dedupe read hash-joined whole partitions of ``ingestion_messages`` and
    ``ingest_dedupe_keys`` and the careful claim hashed every kept generation, so both grew
    with the tables (bench/soak.py: 2.5 s a read at 2 million envelopes). Each key is an index
    probe of its own, whatever the statistics."""
    pool = await postgres.create_pool(pg_dsn, postgres.streaming_pool(1))
    try:
        async with pool.acquire() as conn:
            await _record_seen(conn, 30_000)
            assert await conn.fetchval(
                "SELECT count(*) FROM pg_stats WHERE tablename LIKE 'ingest_dedupe_keys%'"
                " OR tablename LIKE 'ingestion_messages%'") == 0  # never analyzed
            keys = [f"seen-{i}" for i in range(1, 500)] + [f"new-{i}" for i in range(500)]
            read = "\n".join(r[0] for r in await conn.fetch(
                "EXPLAIN " + sql.LOOKUP, *_lookup_args(keys)))
            async with conn.transaction():
                claim = "\n".join(r[0] for r in await conn.fetch(
                    "EXPLAIN " + sql.CLAIM_KEYS, [uuid.UUID(key_hash(k)) for k in keys], 2,
                    list(range(10**9, 10**9 + len(keys))),
                    [datetime(2026, 1, 2, tzinfo=UTC)] * len(keys)))
    finally:
        await pool.close()
    for plan in (read, claim):
        assert "Seq Scan" not in plan and "Hash" not in plan, plan
    assert "ingest_dedupe_keys_g1_pkey" in read and "ingestion_messages_" in read
    assert "ingest_dedupe_keys_g1_pkey" in claim


async def test_the_duplicates_of_a_message_are_read_through_their_own_index(
    pg_pool: asyncpg.Pool,
) -> None:
    """``tideway messages show`` lists a message's duplicates; without an index on
    ``duplicate_of`` that read went through every duplicate row."""
    async with pg_pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")  # the table is empty here
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql.MESSAGE_DUPLICATES, 7))
    # Each partition's copy of ix_ingestion_messages_duplicate_of (named after the partition).
    assert "_duplicate_of_idx" in plan
    assert "Index Cond: (duplicate_of = " in plan
