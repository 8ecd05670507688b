"""Every status and early-termination path, end to end on real services."""

from __future__ import annotations

import orjson

from stages.ingest.ingress import key_hash
from tests.integration.ingest.conftest import Harness, good_values


async def test_completed_envelope_is_recorded_persisted_and_published(fleet: Harness) -> None:
    seq = await fleet.publish(
        "d1", {"ts": 1_700_000_000_000, "seq": 1, "values": good_values()}, msg_id="d1-1"
    )
    stats = await fleet.consume(1)
    row = await fleet.message(seq)
    assert row["status"] == "completed" and row["error_code"] is None
    # The row keeps the key's digest (migration 0020).
    assert row["source_deduplication_key"].hex == key_hash("m:acme:d1-1")
    assert await fleet.stages(row["id"]) == [
        ("ingress", "ok", None),
        ("validate", "ok", None),
        ("mutate", "ok", None),
        ("derive", "ok", None),
        ("persist", "ok", None),
        ("publish", "ok", None),
    ]
    telemetry = await fleet.telemetry(row["id"])
    assert telemetry is not None and telemetry["processing_state"] == "processed"
    assert telemetry["parameter_values"]["battery_v"] == 3.7
    assert telemetry["parameter_values"]["temp_f"] == 70.7
    assert await fleet.analytics_rows("m:acme:d1-1") == 10
    hot = await fleet.hot_state("d1")
    assert hot["state"]["values"]["temp_f"] == 70.7 and hot["state"]["seq"] == 1
    assert hot["state"]["message_key"] == "m:acme:d1-1"
    assert sum(s.statuses.get("completed", 0) for s in stats) == 1


async def test_snapshots_are_off_by_default(fleet: Harness) -> None:
    await fleet.publish("d1", {"ts": 1, "values": good_values()})
    await fleet.consume(1)
    assert (
        await fleet.count(
            "SELECT count(*) FROM ingestion_stage_logs WHERE input_snapshot IS NOT NULL "
            "OR output_snapshot IS NOT NULL"
        )
        == 0
    )


async def test_unknown_device_topic_and_missing_schema_stop_after_ingress(fleet: Harness) -> None:
    seqs = {
        "UNKNOWN_DEVICE": await fleet.publish("ghost", {"ts": 1, "values": good_values()}),
        "UNKNOWN_TOPIC": await fleet.publish(
            "d1", {"ts": 1, "values": good_values()}, topic="diagnostics"
        ),
        "DEVICE_NO_SCHEMA_VERSION": await fleet.publish("bare", {"ts": 1, "values": good_values()}),
    }
    await fleet.consume(3)
    for code, seq in seqs.items():
        row = await fleet.message(seq)
        assert (row["status"], row["error_code"]) == ("failed_terminal", code)
        assert await fleet.stages(row["id"]) == [("ingress", "failed", code)]
        assert await fleet.telemetry(row["id"]) is None
    assert await fleet.count("SELECT count(*) FROM dead_letters") == 0
    assert await fleet.analytics_rows() == 0


async def test_failed_validation_keeps_an_invalid_telemetry_row(fleet: Harness) -> None:
    seq = await fleet.publish("d1", {"ts": 1, "values": good_values(temp=150.0)})
    await fleet.consume(1)
    row = await fleet.message(seq)
    assert (row["status"], row["error_code"]) == ("failed_validation", "VALIDATION_FAILED")
    assert await fleet.stages(row["id"]) == [
        ("ingress", "ok", None),
        ("validate", "failed", "VALIDATION_FAILED"),
        ("persist", "ok", None),
    ]
    telemetry = await fleet.telemetry(row["id"])
    assert telemetry is not None and telemetry["processing_state"] == "invalid"
    assert telemetry["validation_issues"][0]["code"] == "OUT_OF_RANGE"
    assert await fleet.analytics_rows() == 0


async def test_inactive_device_is_persisted_for_audit_without_side_effects(fleet: Harness) -> None:
    seq = await fleet.publish("off", {"ts": 1, "values": good_values()})
    await fleet.consume(1)
    row = await fleet.message(seq)
    assert row["status"] == "inactive_skipped"
    assert await fleet.stages(row["id"]) == [
        ("ingress", "ok", None),
        ("validate", "ok", None),
        ("persist", "ok", None),
    ]
    telemetry = await fleet.telemetry(row["id"])
    assert telemetry is not None and telemetry["processing_state"] == "inactive_skipped"
    assert await fleet.analytics_rows() == 0


async def test_unparseable_and_oversized_envelopes_are_recorded_and_dead_lettered(
    fleet: Harness,
) -> None:
    limit = fleet.settings.consumer.max_payload_bytes
    big = orjson.dumps({"ts": 1, "values": {"blob": "x" * limit}})
    seqs = {
        "ENVELOPE_UNPARSEABLE": await fleet.publish("d1", None, raw=b"\x00not json"),
        "ENVELOPE_TOO_LARGE": await fleet.publish("d1", None, raw=big),
        "ENVELOPE_INVALID": await fleet.publish("d1", {"values": {}}),
    }
    await fleet.consume(3)
    for code, seq in seqs.items():
        row = await fleet.message(seq)
        assert (row["status"], row["error_code"]) == ("failed_terminal", code)
        async with fleet.pool.acquire() as conn:
            dead = await conn.fetchrow(
                "SELECT * FROM dead_letters WHERE ingestion_message_id = $1", row["id"]
            )
        assert dead is not None and dead["reason_code"] == code and dead["state"] == "open"
        assert dead["failures"][0]["code"] == code
    big_row = await fleet.message(seqs["ENVELOPE_TOO_LARGE"])
    async with fleet.pool.acquire() as conn:
        payload = await conn.fetchval(
            "SELECT payload FROM dead_letters WHERE ingestion_message_id = $1", big_row["id"]
        )
    assert payload == big  # the original envelope, byte for byte


async def test_what_a_device_sends_cannot_grow_the_value_layouts(fleet: Harness) -> None:
    """A layout's keys are the topic's parameters in the schema's order (every measured one,
    ``null`` when absent, plus the derived ones once derived), so envelopes leaving out any
    optional parameters share one layout; only a different stage reached (an invalid envelope:
    measured values only) makes another."""
    full = good_values()
    optional = ("rh", "pressure_pa", "bat_mv", "door", "wind", "fw")
    for i in range(len(optional) + 1):
        values = {k: v for k, v in full.items() if k not in optional[:i]}
        await fleet.publish("d1", {"ts": i, "seq": i, "values": values}, msg_id=f"lay-{i}")
    await fleet.publish("d1", {"ts": 9, "values": {"temp": "hot"}}, msg_id="lay-invalid")
    await fleet.consume(len(optional) + 2)
    async with fleet.pool.acquire() as conn:
        states = await conn.fetch(
            "SELECT processing_state, count(DISTINCT values_layout) AS layouts"
            " FROM device_telemetry_logs GROUP BY 1 ORDER BY processing_state::text")
        assert [tuple(r) for r in states] == [("invalid", 1), ("processed", 1)]
        assert await conn.fetchval("SELECT count(*) FROM telemetry_value_layouts") == 2
        # The envelope without any optional parameter kept them all, as nulls.
        values = await conn.fetchval(
            "SELECT telemetry_values(values_layout, parameter_list) FROM device_telemetry_logs"
            " WHERE processing_state = 'processed' ORDER BY measured_at DESC LIMIT 1")
    assert values["humidity"] is None and values["firmware"] is None
    assert values["temp_c"] == full["temp"]


async def test_a_malformed_envelope_on_a_registered_devices_subject_is_that_devices(
    fleet: Harness,
) -> None:
    """Its message row carries the device and its tenant (its subject names them), so the
    device's data quality and the fleet's totals count it; one on an unknown device's subject
    or on a subject that is not ours carries neither. An envelope that reaches persist still
    leaves them to its telemetry row."""
    seqs = {
        "d1": await fleet.publish("d1", None, raw=b"{not json"),
        "ghost": await fleet.publish("ghost", None, raw=b"{not json"),
        "good": await fleet.publish("d1", {"ts": 1, "seq": 1, "values": good_values()}),
    }
    await fleet.publish("d1", None, raw=b"{not json", tenant="Acme")  # not a tenant's spelling
    await fleet.consume(4)
    async with fleet.pool.acquire() as conn:
        rows = {r["stream_seq"]: r for r in await conn.fetch(
            "SELECT m.stream_seq, m.status, m.error_code, tn.name AS tenant,"
            "       d.external_id AS device, m.subject IS NOT NULL AS keeps_subject"
            " FROM ingestion_messages m LEFT JOIN tenants tn ON tn.id = m.tenant_id"
            " LEFT JOIN devices d ON d.id = m.device_id")}  # fmt: skip
        letters = dict(await conn.fetch("SELECT subject, tenant FROM dead_letters"))
    mine = rows[seqs["d1"]]
    assert (mine["status"], mine["error_code"]) == ("failed_terminal", "ENVELOPE_UNPARSEABLE")
    assert (mine["tenant"], mine["device"], mine["keeps_subject"]) == ("acme", "d1", True)
    ghost = rows[seqs["ghost"]]
    assert (ghost["error_code"], ghost["tenant"], ghost["device"]) == (
        "ENVELOPE_UNPARSEABLE", None, None)
    # Processed: its telemetry row holds the device (migration 0020), as before.
    good = rows[seqs["good"]]
    assert (good["status"], good["tenant"], good["device"]) == ("completed", None, None)
    (stray,) = [r for s, r in rows.items() if s not in seqs.values()]
    assert (stray["error_code"], stray["tenant"], stray["device"]) == (
        "SUBJECT_INVALID", None, None)
    subject = fleet.names.telemetry_subject("acme", "d1", "state")
    assert letters[subject] == "acme"
