"""Operator tools on real services: replay, messages show, simulate."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from stages.ingest.ingress import key_hash
from streams.ingest.messages import explain
from streams.ingest.replay import replay
from streams.ingest.simulate import ensure_fleet, simulate
from tests.integration.ingest.conftest import Harness, good_values


async def test_replay_changes_nothing_for_processed_envelopes_and_fills_gaps(
    fleet: Harness,
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=5)
    for i in range(3):
        await fleet.publish("d1", {"ts": i, "values": good_values()}, msg_id=f"r-{i}")
    await fleet.consume(3)
    # Two envelopes arrive while no consumer runs: nothing records them yet.
    gap = [await fleet.publish("d2", {"ts": 10 + i, "values": good_values()}) for i in range(2)]
    await fleet.publish("d1", {"ts": 99, "values": good_values(temp=500.0)}, msg_id="r-bad")

    dry = await replay(fleet.settings, since=since, dry_run=True)
    assert (dry.scanned, dry.already_recorded) == (6, 3)
    assert dict(dry.recorded) == {"completed": 2, "failed_validation": 1}
    assert await fleet.count() == 3  # a dry run writes nothing

    only_d2 = await replay(fleet.settings, since=since, subject="telemetry.acme.d2.*")
    assert (only_d2.scanned, dict(only_d2.recorded)) == (2, {"completed": 2})
    assert [(await fleet.message(s))["status"] for s in gap] == ["completed", "completed"]

    full = await replay(fleet.settings, since=since)
    assert (full.scanned, full.already_recorded, dict(full.recorded)) == (
        6,
        5,
        {"failed_validation": 1},
    )
    again = await replay(fleet.settings, since=since)
    assert (again.already_recorded, sum(again.recorded.values())) == (6, 0)
    assert await fleet.count() == 6
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 6
    assert await fleet.analytics_rows() == 50

    before = await replay(fleet.settings, since=since, until=since + timedelta(seconds=1))
    assert before.scanned == 0


async def test_messages_show_explains_an_envelope(fleet: Harness) -> None:
    await asyncio.sleep(0)
    seq = await fleet.publish("d1", {"ts": 5, "seq": 1, "values": good_values()}, msg_id="x-1")
    await fleet.consume(1)
    row = await fleet.message(seq)
    # By id, by key, and by the key's digest (what the row shows: migration 0020).
    for ident in (str(row["id"]), "m:acme:x-1", key_hash("m:acme:x-1").upper()):
        info = await explain(fleet.settings, ident)
        assert info["message"]["id"] == row["id"]
        assert info["message"]["source_deduplication_key"] == key_hash("m:acme:x-1")
        assert info["message"]["status"] == "completed" and info["message"]["device"] == "d1"
        assert info["message"]["measured_at"] == row["measured_at"] is not None
        assert [s["stage"] for s in info["stages"]] == [
            "ingress",
            "validate",
            "mutate",
            "derive",
            "persist",
            "publish",
        ]
        assert info["telemetry"]["processing_state"] == "processed"
        published = info["published"]
        assert published["hot_state_key"] == fleet.names.hot_state_key("acme", "d1")
        assert published["hot_state_current"] is True
        assert published["analytics_rows"] == 10
        assert info["dead_letter"] is None and info["duplicates"] == []


async def test_simulated_fleet_ends_in_the_statuses_it_announced(harness: Harness) -> None:
    settings = harness.settings
    await ensure_fleet(settings, tenant="simco", devices=6)
    await ensure_fleet(settings, tenant="simco", devices=6)  # idempotent
    report = await simulate(
        settings,
        tenant="simco",
        devices=6,
        rate=300,
        duration=1.5,
        duplicates=0.1,
        late=0.1,
        invalid=0.05,
        unknown_topic=0.05,
        seed=7,
    )
    assert report.publish_errors == 0 and report.stored > 300
    assert report.late > 0 and report.invalid > 0 and report.unknown_topic > 0
    assert report.duplicates_sent > 0
    expected = {k: v for k, v in report.expected.items() if v}
    await harness.consume(report.stored, within=30)
    async with harness.pool.acquire() as conn:
        rows = await conn.fetch("SELECT status, count(*) FROM ingestion_messages GROUP BY 1")
    assert {r["status"]: r["count"] for r in rows} == expected
    assert (
        await harness.count(
            "SELECT count(*) FROM ingestion_messages WHERE error_code = 'UNKNOWN_TOPIC'"
        )
        == report.unknown_topic
    )
