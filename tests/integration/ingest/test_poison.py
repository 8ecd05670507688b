"""A poison envelope cannot stop the batch it arrived in."""

from __future__ import annotations

from tests.integration.ingest.conftest import Harness, good_values


async def test_a_row_postgres_refuses_is_isolated_and_dead_lettered(fleet: Harness) -> None:
    # A real refusal from Postgres for exactly one envelope (the firmware string "poison").
    async with fleet.pool.acquire() as conn:
        await conn.execute(
            "ALTER TABLE device_telemetry_logs ADD CONSTRAINT test_poison "
            "CHECK (parameter_values->>'firmware' IS DISTINCT FROM 'poison')"
        )
    seqs = []
    for i in range(7):
        values = {**good_values(), "fw": "poison" if i == 3 else "1.0"}
        seqs.append(await fleet.publish("d1", {"ts": 1000 + i, "seq": i, "values": values}))
    stats = await fleet.consume(7)
    rows = [await fleet.message(s) for s in seqs]
    assert [r["status"] for r in rows] == ["completed"] * 3 + ["failed_terminal"] + [
        "completed"
    ] * 3
    poison = rows[3]
    assert poison["error_code"] == "PERSIST_REJECTED" and "test_poison" in poison["error_message"]
    assert await fleet.stages(poison["id"]) == [("persist", "failed", "PERSIST_REJECTED")]
    assert await fleet.telemetry(poison["id"]) is None
    async with fleet.pool.acquire() as conn:
        reason = await conn.fetchval(
            "SELECT reason_code FROM dead_letters WHERE ingestion_message_id = $1", poison["id"]
        )
    assert reason == "PERSIST_REJECTED"
    assert sum(s.retried for s in stats) == 0  # nothing was sent back for redelivery


async def test_nul_bytes_in_subject_and_headers_are_recorded_not_fatal(fleet: Harness) -> None:
    js = fleet.nc.jetstream()
    subject = fleet.names.telemetry_subject("acme", "d\x001", "state")
    bad = (
        await js.publish(
            subject,
            b'{"ts": 1, "values": {}}',
            headers={"traceparent": "x\x00y", "Nats-Msg-Id": "n\x00"},
        )
    ).seq
    good = await fleet.publish("d1", {"ts": 2, "values": good_values()})
    await fleet.consume(2)
    row = await fleet.message(bad)
    assert (row["status"], row["error_code"]) == ("failed_terminal", "SUBJECT_INVALID")
    assert "\\u0000" in row["subject"] and row["traceparent"] is None
    assert row["source_deduplication_key"].startswith("m:?:sha256:")
    assert (await fleet.message(good))["status"] == "completed"
    async with fleet.pool.acquire() as conn:
        headers = await conn.fetchval(
            "SELECT headers FROM dead_letters WHERE ingestion_message_id = $1", row["id"]
        )
    assert headers["traceparent"] == "x\\u0000y"
