"""The SQL half of both state machines refuses exactly what the Python tables refuse."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from stages.ingest import processing_state as ps
from stages.ingest import status as st
from stages.ingest.ingress import key_hash

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def _insert_message(conn: asyncpg.Connection, status: str, n: int) -> int:
    dup = status == "duplicate"
    owner = None
    if dup:
        owner = await _insert_message(conn, "completed", n + 100_000)
    return int(
        await conn.fetchval(
            """INSERT INTO ingestion_messages (source_deduplication_key, duplicate_of, stream_seq,
                   received_at, subject, payload_bytes, status)
               VALUES ($1, $2, $3, $4, 'telemetry.a.b.c', 10, $5) RETURNING id""",
            None if dup else uuid.UUID(key_hash(f"k{n}")),
            owner,
            n,
            NOW,
            status,
        )
    )


async def test_every_status_pair_in_sql(pg_pool: asyncpg.Pool) -> None:
    n = 0
    async with pg_pool.acquire() as conn:
        for a, b in itertools.product(list(st.Status), repeat=2):
            if a == b:
                continue
            n += 1
            row = await _insert_message(conn, a.value, n)
            to_dup = b is st.Status.DUPLICATE
            update = (
                "UPDATE ingestion_messages SET status = $2"
                + (", source_deduplication_key = NULL, duplicate_of = id" if to_dup else "")
                + (
                    ", source_deduplication_key = gen_random_uuid(), duplicate_of = NULL"
                    if a is st.Status.DUPLICATE
                    else ""
                )
                + " WHERE id = $1"
            )
            if st.can_transition(a, b):
                await conn.execute(update, row, b.value)
                assert (
                    await conn.fetchval("SELECT status FROM ingestion_messages WHERE id = $1", row)
                    == b.value
                )
            else:
                with pytest.raises(asyncpg.CheckViolationError, match="illegal status transition"):
                    await conn.execute(update, row, b.value)


async def test_every_processing_state_pair_in_sql(pg_pool: asyncpg.Pool) -> None:
    n = 0
    async with pg_pool.acquire() as conn:
        for a, b in itertools.product(list(ps.ProcessingState), repeat=2):
            if a == b:
                continue
            n += 1
            await conn.execute(
                """INSERT INTO device_telemetry_logs (ingestion_message_id, device_id,
                       measured_at, received_at, processing_state, values_layout,
                       parameter_list)
                   VALUES ($1, gen_random_uuid(), $2, $2, $3, 1, '[]')""",
                n,
                NOW,
                a.value,
            )
            update = (
                "UPDATE device_telemetry_logs SET processing_state = $2 "
                "WHERE ingestion_message_id = $1"
            )
            if ps.can_transition(a, b):
                await conn.execute(update, n, b.value)
            else:
                with pytest.raises(
                    asyncpg.CheckViolationError, match="illegal processing_state transition"
                ):
                    await conn.execute(update, n, b.value)


async def test_unknown_values_are_refused(pg_pool: asyncpg.Pool) -> None:
    """The status is an enum (migration 0020): a name outside it is refused on the way in."""
    async with pg_pool.acquire() as conn:
        with pytest.raises(asyncpg.InvalidTextRepresentationError, match="ingestion_status"):
            await _insert_message(conn, "lost", 1)
