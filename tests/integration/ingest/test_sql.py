"""The hot path's SQL against the migrated schema."""

from __future__ import annotations

import io

import asyncpg

from stages.ingest.evaluate import StageLog
from stages.ingest.plan import pass_line
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
    lines = [pass_line(1, 1, plain, capture=False), pass_line(2, 3, captured, capture=True),
             pass_line(3, 1, [StageLog("publish", "ok", 4)], capture=False)]
    async with pg_pool.acquire() as conn:
        await conn.copy_to_table(sql.STAGE_PASSES, source=io.BytesIO("".join(lines).encode()),
                                 columns=list(sql.STAGE_PASS_COPY), format="text")
        rows = await conn.fetch(
            "SELECT message_id, attempt, stage, status, duration_us, error_code, error_message,"
            " input_snapshot, output_snapshot FROM ingestion_stage_logs"
            " ORDER BY message_id, created_at")
    assert [tuple(r) for r in rows] == [
        (1, 1, "ingress", "ok", 5, None, None, None, None),
        (1, 1, "validate", "failed", 9, "VALIDATION_FAILED", nasty.replace("\x00", "\\u0000"),
         None, None),
        (2, 3, "ingress", "ok", 1, None, None, {"subject": "a\tb"}, None),
        (2, 3, "validate", "ok", 2, None, None, None, {"issues": None}),
        (3, 1, "publish", "ok", 4, None, None, None, None),
    ]
