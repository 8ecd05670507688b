"""0005: ``device_telemetry_logs.parameter_values`` is ``json``; down to 0004 it is ``jsonb``
again, and the values survive both ways and still read back as dicts."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from streams import migrate
from streams.adapters import postgres

VALUES = {"temp_c": 21.5, "battery_v": 3.7, "firmware": "1.2.3", "flags": [1, 2], "ok": True}
REVISION = "0005_telemetry_values_json"  # not "head": a later migration must not break this test
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


async def _types(dsn: str) -> dict[str, str]:
    conn = await postgres.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = 'device_telemetry_logs'"
            " AND column_name IN ('parameter_values', 'validation_issues')"
        )
        return {r["column_name"]: r["data_type"] for r in rows}
    finally:
        await conn.close()


async def _values(dsn: str) -> object:
    conn = await postgres.connect(dsn)  # Tideway's codecs, as every reader uses
    try:
        return await conn.fetchval(
            "SELECT parameter_values FROM device_telemetry_logs WHERE ingestion_message_id = 1"
        )
    finally:
        await conn.close()


async def test_parameter_values_json_down_and_up(empty_pg_dsn: str) -> None:
    dsn = empty_pg_dsn
    await asyncio.to_thread(migrate.upgrade, dsn, REVISION)
    assert migrate.current(dsn) == "0005_telemetry_values_json"
    assert await _types(dsn) == {"parameter_values": "json", "validation_issues": "jsonb"}

    conn = await postgres.connect(dsn)
    try:
        await conn.execute(
            """INSERT INTO device_telemetry_logs (ingestion_message_id, tenant_id, device_id,
                   schema_version_id, topic, measured_at, received_at, processing_state,
                   parameter_values)
               VALUES (1, $1, $1, $1, 'state', $2, $2, 'processed', $3)""",
            uuid.uuid4(), NOW, VALUES,
        )
        # Stored as the text that was sent (json keeps it; jsonb would reorder the keys).
        stored = await conn.fetchval(
            "SELECT parameter_values::text FROM device_telemetry_logs"
            " WHERE ingestion_message_id = 1"
        )
        assert stored.startswith('{"temp_c":21.5,')
    finally:
        await conn.close()
    assert await _values(dsn) == VALUES

    await asyncio.to_thread(migrate.downgrade, dsn, "0004_stage_passes")
    assert migrate.current(dsn) == "0004_stage_passes"
    assert await _types(dsn) == {"parameter_values": "jsonb", "validation_issues": "jsonb"}
    assert await _values(dsn) == VALUES

    await asyncio.to_thread(migrate.upgrade, dsn, REVISION)
    assert await _types(dsn) == {"parameter_values": "json", "validation_issues": "jsonb"}
    assert await _values(dsn) == VALUES
