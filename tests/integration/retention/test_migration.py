"""Migration 0012 on a database holding rows the real pipeline wrote: down to the unpartitioned
layout of 0008 and up again without losing or changing a row, and the dedupe keys still
recognised after the trip."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson

from stages.ingest.ingress import key_hash
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
    # {values} is the values as JSON text, however the revision stores them.
    "device_telemetry_logs": "SELECT ingestion_message_id, device_id, measured_at,"
    " received_at, processing_state, {values}::text FROM device_telemetry_logs"
    " ORDER BY ingestion_message_id",
    "dead_letters": "SELECT id, ingestion_message_id, state FROM dead_letters ORDER BY id",
}


async def _has_column(h: Harness, table: str, column: str) -> bool:
    async with h.pool.acquire() as conn:
        return bool(await conn.fetchval(
            "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = $1::regclass"
            " AND attname = $2 AND NOT attisdropped)", table, column))


def _key(value: Any) -> str | None:
    """A message's dedupe key as its digest, whichever way the revision holds it: the digest
    (0020), ``digest:<hex>`` (0020's downgrade, where the text is unknown) or the text."""
    if value is None or isinstance(value, uuid.UUID):
        return None if value is None else value.hex
    return value[len("digest:"):] if value.startswith("digest:") else key_hash(value)


async def _read(h: Harness, queries: dict[str, str], values: str = ""
                ) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of ``queries``; a message row as the revision's readers see it (from 0020
    through the ``ingestion_records`` view, which fills in what its telemetry row holds), its
    key (column 1) as a digest."""
    async with h.pool.acquire() as conn:
        view = await conn.fetchval("SELECT to_regclass('ingestion_records') IS NOT NULL")
        out = {}
        for table, query in queries.items():
            if view and table == "ingestion_messages":
                query = query.replace("FROM ingestion_messages", "FROM ingestion_records")
            rows = [tuple(r) for r in await conn.fetch(query.format(values=values))]
            if table == "ingestion_messages":
                rows = [(r[0], _key(r[1]), *r[2:]) for r in rows]
            out[table] = rows
        return out


async def _snapshot(h: Harness) -> dict[str, list[tuple[Any, ...]]]:
    # Before 0018 the values are a JSON object; from 0018 a list its function gives keys to.
    values = ("parameter_values" if await _has_column(h, "device_telemetry_logs",
                                                      "parameter_values")
              else "telemetry_values(values_layout, parameter_list)")
    return await _read(h, _ROWS, values)


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


# Migration 0018 (compact rows): every column a reader sees, read the way each layout holds it.
_BEFORE_0018 = {
    "ingestion_messages": "SELECT id, source_deduplication_key, subject, tenant_id, device_id,"
    " status, attempts, created_at, updated_at FROM ingestion_messages ORDER BY id",
    "ingestion_stage_logs": _ROWS["ingestion_stage_logs"],
    "device_telemetry_logs": "SELECT ingestion_message_id, tenant_id, device_id,"
    " schema_version_id, topic, measured_at, seq, received_at, processing_state,"
    " parameter_values, validation_issues, created_at, updated_at FROM device_telemetry_logs"
    " ORDER BY ingestion_message_id",
}
_FROM_0018 = {
    **_BEFORE_0018,
    "ingestion_messages": _BEFORE_0018["ingestion_messages"].replace(
        "updated_at", "coalesce(updated_at, created_at)").replace(
        "subject,", "message_subject(subject, subject_prefix, tenant_id, device_id,"
        " schema_topic_id),"),
    "device_telemetry_logs": "SELECT t.ingestion_message_id, d.tenant_id, t.device_id,"
    " l.schema_version_id, l.topic, t.measured_at, t.seq, t.received_at, t.processing_state,"
    " telemetry_values(t.values_layout, t.parameter_list), t.validation_issues, m.created_at,"
    " coalesce(t.updated_at, m.created_at) FROM device_telemetry_logs t"
    " JOIN telemetry_value_layouts l ON l.id = t.values_layout"
    " JOIN devices d ON d.id = t.device_id"
    " JOIN ingestion_messages m ON m.id = t.ingestion_message_id"
    " AND m.received_at = t.received_at ORDER BY t.ingestion_message_id",
}


async def _rows(h: Harness, queries: dict[str, str]) -> dict[str, list[tuple[Any, ...]]]:
    return await _read(h, queries)


async def test_compact_rows_down_and_up_again_keeps_every_value(fleet: Harness) -> None:
    from alembic.script import ScriptDirectory

    dsn = fleet.settings.postgres()
    script = ScriptDirectory.from_config(migrate.alembic_config(dsn))
    before = script.get_revision("0018_compact_rows").down_revision
    assert isinstance(before, str)
    for i in range(4):
        await fleet.publish("d1", {"ts": i, "seq": i, "values": good_values()}, msg_id=f"c-{i}")
    # A second layout: an optional parameter left out.
    partial = {k: v for k, v in good_values().items() if k != "humidity"}
    await fleet.publish("d1", {"ts": 5, "seq": 5, "values": partial}, msg_id="c-partial")
    await fleet.publish("off", {"ts": 9, "values": good_values()}, msg_id="c-inactive")
    await fleet.publish("d1", {"ts": 7, "values": {"temp": "hot"}}, msg_id="c-invalid")
    await fleet.consume(7)
    async with fleet.pool.acquire() as conn:
        # A redriven row has an update time; the others have none until then.
        await conn.execute("UPDATE ingestion_messages SET updated_at = now() + interval '1 hour'"
                           " WHERE id = (SELECT min(id) FROM ingestion_messages)")
        await conn.execute("UPDATE device_telemetry_logs SET updated_at = now() + interval '1 h'"
                           " WHERE ingestion_message_id = (SELECT min(id) FROM ingestion_messages)")
        assert await conn.fetchval("SELECT count(*) FROM telemetry_value_layouts") >= 2
        assert await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE updated_at IS NULL") == 6
        # Every one of these envelopes names a known device and topic, so no row keeps its
        # subject: tenant, device and topic spell it.
        assert await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE subject IS NULL") == 7
    recorded = await _rows(fleet, _FROM_0018)
    assert len(recorded["device_telemetry_logs"]) == 7
    assert len(recorded["ingestion_stage_logs"]) > 7 * 2

    await asyncio.to_thread(migrate.downgrade, dsn, before)
    await fleet.pool.expire_connections()
    assert not await _has_column(fleet, "device_telemetry_logs", "parameter_list")
    assert await _rows(fleet, _BEFORE_0018) == recorded
    async with fleet.pool.acquire() as conn:
        # The old layout's own spelling of the values: the compact JSON the pipeline wrote.
        text = await conn.fetchval("SELECT parameter_values::text FROM device_telemetry_logs"
                                   " ORDER BY ingestion_message_id LIMIT 1")
    assert text == orjson.dumps(recorded["device_telemetry_logs"][0][9]).decode()

    await asyncio.to_thread(migrate.upgrade, dsn)
    await fleet.pool.expire_connections()
    assert not await _has_column(fleet, "device_telemetry_logs", "parameter_values")
    assert await _rows(fleet, _FROM_0018) == recorded

    # The pipeline goes on in the compact layout, reusing the layouts the upgrade registered.
    async with fleet.pool.acquire() as conn:
        layouts = await conn.fetchval("SELECT count(*) FROM telemetry_value_layouts")
    fresh = await fleet.publish("d1", {"ts": 11, "seq": 11, "values": good_values()},
                                msg_id="c-new")
    await fleet.consume(8)
    row = await fleet.telemetry((await fleet.message(fresh))["id"])
    assert row is not None and row["parameter_values"] == recorded["device_telemetry_logs"][0][9]
    async with fleet.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM telemetry_value_layouts") == layouts


# Migration 0019 (a transaction's stage passes in one row): every stage log, snapshots too.
_STAGE_LOGS = {
    "ingestion_stage_logs": "SELECT message_id, attempt, stage, status, duration_us,"
    " error_code, error_message, input_snapshot, output_snapshot, created_at"
    " FROM ingestion_stage_logs ORDER BY message_id, attempt, stage",
}


async def test_stage_pass_batches_down_and_up_again_keep_every_stage_log(
    fleet: Harness,
) -> None:
    dsn = fleet.settings.postgres()
    for i in range(4):
        await fleet.publish("d1", {"ts": i, "seq": i, "values": good_values()}, msg_id=f"b-{i}")
    await fleet.publish("d1", {"ts": 7, "values": {"temp": "hot"}}, msg_id="b-invalid")
    await fleet.consume(5)
    async with fleet.pool.acquire() as conn:
        # A redrive's pass (attempt 2) and a pass with snapshots, as their writers make them.
        first = await conn.fetchval("SELECT min(id) FROM ingestion_messages")
        await conn.execute(
            "INSERT INTO ingestion_stage_passes (message_ids, message_id_min, message_id_max,"
            " attempt, stages, failed, durations, error_codes, error_messages,"
            " input_snapshots, output_snapshots)"
            " VALUES (ARRAY[$1::bigint], $1, $1, 2, '{32}', '{32}', '{0,0,0,0,0,9}',"
            " '{NULL,NULL,NULL,NULL,NULL,PUBLISH_FAILED}', '{NULL,NULL,NULL,NULL,NULL,no}',"
            " '[null, null, null, null, null, {\"in\": 1}]',"
            " '[null, null, null, null, null, {\"out\": [2]}]')", first)
        passes = await conn.fetchval("SELECT count(*) FROM ingestion_stage_passes")
    recorded = await _rows(fleet, _STAGE_LOGS)
    logs = recorded["ingestion_stage_logs"]
    assert len({r[0] for r in logs}) == 5 and {r[1] for r in logs} == {1, 2}
    assert any(r[5] == "VALIDATION_FAILED" for r in logs)  # the invalid envelope's errors
    assert [r[7:9] for r in logs if r[1] == 2] == [({"in": 1}, {"out": [2]})]
    assert passes < 5 + 1  # the consumer's batches hold several passes each

    await asyncio.to_thread(migrate.downgrade, dsn, "0018_compact_rows")
    await fleet.pool.expire_connections()
    assert await _rows(fleet, _STAGE_LOGS) == recorded
    async with fleet.pool.acquire() as conn:  # one row per pass again
        assert await conn.fetchval("SELECT count(*) FROM ingestion_stage_passes") == 5 + 1

    await asyncio.to_thread(migrate.upgrade, dsn)
    await fleet.pool.expire_connections()
    assert await _rows(fleet, _STAGE_LOGS) == recorded
    async with fleet.pool.acquire() as conn:
        # Regrouped by transaction: as many rows as before the trip.
        assert await conn.fetchval("SELECT count(*) FROM ingestion_stage_passes") == passes
        # The same partitions (a partition of the day and DEFAULT at least).
        assert await conn.fetchval(
            "SELECT count(*) FROM pg_inherits"
            " WHERE inhparent = 'ingestion_stage_passes'::regclass") >= 2


# Migration 0020 (lean records): the table itself, and what readers see of it.
_LEAN_TABLE = {
    "ingestion_messages": "SELECT id, source_deduplication_key, tenant_id, device_id,"
    " schema_version_id, schema_topic_id, measured_at, seq, status::text, subject,"
    " subject_prefix FROM ingestion_messages ORDER BY id",
    "device_telemetry_logs": "SELECT ingestion_message_id, device_id, measured_at, seq,"
    " received_at, processing_state::text, values_layout, parameter_list::text"
    " FROM device_telemetry_logs ORDER BY ingestion_message_id",
    "dead_letters": "SELECT id, ingestion_message_id, reason_code, schema_version_id"
    " FROM dead_letters ORDER BY id",
}


async def test_lean_records_down_and_up_again_keep_every_row(fleet: Harness) -> None:
    dsn = fleet.settings.postgres()
    stream = fleet.settings.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(fleet.settings.model_copy(update={"stream": stream}))
    for i in range(3):
        await fleet.publish("d1", {"ts": i, "seq": i, "values": good_values()}, msg_id=f"l-{i}")
    no_id = await fleet.publish("d2", {"ts": 4, "values": good_values()})
    await fleet.publish("off", {"ts": 5, "values": good_values()}, msg_id="l-inactive")
    await fleet.publish("d1", {"ts": 6, "values": {"temp": "hot"}}, msg_id="l-invalid")
    await fleet.publish("ghost", {"ts": 7, "values": good_values()}, msg_id="l-ghost")
    bad = await fleet.publish("d1", None, raw=b"not json", msg_id="l-bad")  # dead-lettered
    await asyncio.sleep(1.0)  # past the stream's duplicate window: Tideway's dedupe decides
    await fleet.publish("d1", {"ts": 0, "seq": 0, "values": good_values()}, msg_id="l-0")
    await fleet.consume(9)
    table = await _rows(fleet, _LEAN_TABLE)
    readers = await _snapshot(fleet)
    async with fleet.pool.acquire() as conn:
        # What the telemetry rows hold is not on their message rows; the view reads it back.
        assert await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages m JOIN device_telemetry_logs t"
            " ON t.ingestion_message_id = m.id AND t.received_at = m.received_at"
            " WHERE m.device_id IS NULL AND m.tenant_id IS NULL AND m.measured_at IS NULL"
            " AND m.schema_version_id IS NULL AND m.schema_topic_id IS NULL") == 6
        assert await conn.fetchval(
            "SELECT count(*) FROM ingestion_records WHERE device_id IS NOT NULL"
            " AND tenant_id IS NOT NULL AND measured_at IS NOT NULL") == 7  # not ghost, bad
        bad_id = await conn.fetchval(
            "SELECT id FROM ingestion_messages WHERE stream_seq = $1", bad)
        assert await conn.fetchval(
            "SELECT dedupe_key FROM dead_letters WHERE ingestion_message_id = $1",
            bad_id) == "m:acme:l-bad"
        no_id_key = await fleet.stored_key(no_id)
        assert (await fleet.message(no_id))["source_deduplication_key"].hex == key_hash(no_id_key)
    assert await _duplicates_of(fleet, "l-0", "l-1") == [(1, 0)]  # l-0's repeat, once

    await asyncio.to_thread(migrate.downgrade, dsn, "0019_stage_pass_batches")
    await fleet.pool.expire_connections()
    assert await _snapshot(fleet) == readers  # the columns are on the message rows again
    async with fleet.pool.acquire() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE device_id IS NULL") == 1  # ghost
        # (the malformed one names d1, whose subject it came on: issue 29's attribution)
        # The text a dead letter kept; a digest where none did.
        assert await conn.fetchval(
            "SELECT source_deduplication_key FROM ingestion_messages WHERE id = $1",
            bad_id) == "m:acme:l-bad"
        assert await conn.fetchval(
            "SELECT source_deduplication_key FROM ingestion_messages WHERE stream_seq = $1",
            no_id) == "digest:" + key_hash(no_id_key)
        assert await conn.fetchval(
            "SELECT data_type FROM information_schema.columns"
            " WHERE table_name = 'ingestion_messages' AND column_name = 'status'") == "text"

    await asyncio.to_thread(migrate.upgrade, dsn)
    await fleet.pool.expire_connections()
    assert await _rows(fleet, _LEAN_TABLE) == table
    assert await _snapshot(fleet) == readers
    # The pipeline goes on: a recorded key is still a duplicate, by text or digest alike.
    await asyncio.sleep(1.0)
    await fleet.publish("d1", {"ts": 1, "seq": 1, "values": good_values()}, msg_id="l-1")
    await fleet.consume(10)
    assert await _duplicates_of(fleet, "l-0", "l-1") == [(1, 1)]


async def _duplicates_of(h: Harness, *msg_ids: str) -> list[tuple[int, ...]]:
    """How many ``duplicate`` rows name the owner of each message id's key."""
    async with h.pool.acquire() as conn:
        return [tuple([
            await conn.fetchval(
                "SELECT count(*) FROM ingestion_messages d JOIN ingestion_messages o"
                " ON o.id = d.duplicate_of WHERE o.source_deduplication_key = $1",
                uuid.UUID(key_hash(f"m:acme:{msg_id}")))
            for msg_id in msg_ids])]
