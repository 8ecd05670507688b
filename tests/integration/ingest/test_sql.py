"""The hot path's SQL against the migrated schema."""

from __future__ import annotations

import asyncpg

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
