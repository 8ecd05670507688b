"""Migration 0012 on a database holding rows the real pipeline wrote: down to the unpartitioned
layout of 0008 and up again without losing or changing a row, and the dedupe keys still
recognised after the trip."""

from __future__ import annotations

import asyncio
from typing import Any

from streams import migrate
from streams.ingest.provision import provision
from tests.integration.ingest.conftest import Harness, good_values

_ROWS = {
    "ingestion_messages": "SELECT id, source_deduplication_key, duplicate_of, stream_seq,"
    " received_at, status, attempts, created_at FROM ingestion_messages ORDER BY id",
    # Through the view: the same stage logs whichever way the passes are stored.
    "ingestion_stage_logs": "SELECT message_id, attempt, stage, status, duration_us,"
    " error_code, error_message, created_at FROM ingestion_stage_logs"
    " ORDER BY message_id, attempt, stage",
    "device_telemetry_logs": "SELECT ingestion_message_id, device_id, measured_at,"
    " received_at, processing_state, parameter_values::text FROM device_telemetry_logs"
    " ORDER BY ingestion_message_id",
    "dead_letters": "SELECT id, ingestion_message_id, state FROM dead_letters ORDER BY id",
}


async def _snapshot(h: Harness) -> dict[str, list[tuple[Any, ...]]]:
    async with h.pool.acquire() as conn:
        return {t: [tuple(r) for r in await conn.fetch(q)] for t, q in _ROWS.items()}


async def _relkind(h: Harness, table: str) -> str:
    async with h.pool.acquire() as conn:
        return str(
            await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE oid = $1::regclass", table
            )
        )


async def test_down_to_0008_and_up_again_keeps_every_row(fleet: Harness) -> None:
    stream = fleet.settings.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(fleet.settings.model_copy(update={"stream": stream}))
    for i in range(5):
        await fleet.publish("d1", {"ts": i, "seq": i, "values": good_values()}, msg_id=f"up-{i}")
    await fleet.publish("off", {"ts": 9, "values": good_values()}, msg_id="up-inactive")
    await fleet.publish("d1", {"ts": 7, "values": {"temp": "hot"}}, msg_id="up-invalid")
    await asyncio.sleep(0.3)
    await fleet.publish("d1", {"ts": 0, "seq": 0, "values": good_values()}, msg_id="up-0")
    await fleet.consume(8)
    recorded = await _snapshot(fleet)
    assert len(recorded["ingestion_messages"]) == 8
    assert len(recorded["device_telemetry_logs"]) == 7
    dsn = fleet.settings.postgres()

    await asyncio.to_thread(migrate.downgrade, dsn, "0008_trace_context")
    await fleet.pool.expire_connections()
    assert await _relkind(fleet, "ingestion_messages") == "r"  # unpartitioned again
    assert await _snapshot(fleet) == recorded

    await asyncio.to_thread(migrate.upgrade, dsn)
    await fleet.pool.expire_connections()
    assert await _relkind(fleet, "ingestion_messages") == "p"
    assert await _snapshot(fleet) == recorded
    async with fleet.pool.acquire() as conn:
        keys = await conn.fetchval("SELECT count(*) FROM ingest_dedupe_keys")
        last_id = max(r[0] for r in recorded["ingestion_messages"])
    assert keys == 7  # one per owner; the duplicate row has none

    # The pipeline goes on: an old key is still a duplicate, ids continue after the old ones.
    await asyncio.sleep(0.3)
    again = await fleet.publish("d1", {"ts": 3, "seq": 3, "values": good_values()}, msg_id="up-3")
    fresh = await fleet.publish(
        "d1", {"ts": 11, "seq": 11, "values": good_values()}, msg_id="up-new"
    )
    await fleet.consume(10)
    dup, new = await fleet.message(again), await fleet.message(fresh)
    assert dup["status"] == "duplicate" and new["status"] == "completed"
    assert min(dup["id"], new["id"]) > last_id
