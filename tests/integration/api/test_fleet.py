"""``GET /v1/fleet``: each device's data-quality figures, from envelopes recorded by the real
ingest consumer (gaps, out-of-order arrivals, duplicates, invalid envelopes, latency); and the
console's window statements over envelopes recorded as migration 0020 lays them out (a message
row and a telemetry row each), against what they answered before, read from the
``ingestion_records`` view."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

from streams.api.keys import create_api_key
from streams.ingest import sql
from streams.ingest.provision import provision
from streams.views.data_quality import device_quality, fleet_totals, recent_messages
from streams.views.latency import SAMPLE, end_to_end
from tests.integration.api.conftest import api_client, key_headers
from tests.integration.ingest.conftest import Harness, good_values, seed_fleet


def envelope(seq: int, age_s: float, **values: Any) -> dict[str, Any]:
    ts = int((time.time() - age_s) * 1000)
    return {"ts": ts, "seq": seq, "values": good_values(**values)}


async def test_the_fleet_page_finds_the_sick_device(fleet: Harness) -> None:
    # d1 loses seq 3, delivers 4 after 5, sends seq 2 twice and one invalid envelope;
    # d2 is healthy.
    # JetStream absorbs a repeated message id inside its duplicate window: shrink the window
    # so the repeat reaches Tideway's own dedupe.
    stream = fleet.settings.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(fleet.settings.model_copy(update={"stream": stream}))
    again = envelope(2, 8)
    await fleet.publish("d1", envelope(1, 9))
    await fleet.publish("d1", again, msg_id="d1-2")
    await fleet.publish("d1", envelope(5, 7))
    await fleet.publish("d1", envelope(4, 6))
    await asyncio.sleep(0.3)
    await fleet.publish("d1", again, msg_id="d1-2")
    await fleet.publish("d1", {"ts": int(time.time() * 1000), "seq": 6, "values": {"temp": "x"}})
    await fleet.publish("d2", envelope(1, 3))
    await fleet.consume(7)
    async with fleet.pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="fleet")
        statuses = dict(
            await conn.fetch("SELECT status, count(*) FROM ingestion_messages GROUP BY status")
        )
    headers = {"Authorization": f"Bearer {key.secret}"}
    async with api_client(fleet.settings, fleet.pool) as client:
        resp = await client.get("/v1/fleet?sort=seq_gaps", headers=headers)
        assert resp.status == 200, await resp.text()
        report = await resp.json()
        assert report["statuses"] == statuses
        assert report["matched"] == 2
        sick, healthy = report["devices"]
        assert sick["device"] == "d1" and healthy["device"] == "d2"
        assert sick["seq_gaps"] == 1
        assert sick["out_of_order"] == 1
        assert sick["duplicates"] == 1
        assert sick["envelopes"] == 5
        assert sick["invalid_share"] == 1 / 5
        assert 5 < sick["latency_p50_s"] < 120  # measured 6-9 s before it was sent
        assert 0 < sick["clock_skew_s"] <= sick["latency_p50_s"]
        assert (healthy["seq_gaps"], healthy["out_of_order"], healthy["duplicates"]) == (0, 0, 0)

        found = await (await client.get("/v1/fleet?search=D2", headers=headers)).json()
        assert [d["device"] for d in found["devices"]] == ["d2"] and found["matched"] == 1
        bad = await client.get("/v1/fleet?sort=name", headers=headers)
        assert bad.status == 400


# What the statements answered before migration 0020 (one ingestion_messages row per envelope
# holding the tenant, device, measurement and seq), read from the ingestion_records view, which
# fills those columns in from the telemetry rows. Arrival order is received_at, then id.
_BEFORE_DEVICES = """
WITH recent AS (
  SELECT m.device_id, m.status, m.received_at, m.measured_at, m.seq,
         m.seq < lag(m.seq) OVER (PARTITION BY m.device_id, m.status = 'duplicate'
                                  ORDER BY m.received_at, m.id) AS behind
  FROM ingestion_records m
  WHERE m.tenant_id = $1 AND m.received_at > $2::timestamptz - $3::interval AND m.received_at <= $2
    AND m.device_id IS NOT NULL
), q AS (
  SELECT device_id, max(received_at) AS last_seen_at,
         count(*) FILTER (WHERE status <> 'duplicate') AS envelopes,
         count(*) FILTER (WHERE status = 'failed_validation')::float8
           / greatest(count(*) FILTER (WHERE status <> 'duplicate'), 1) AS invalid_share,
         count(*) FILTER (WHERE status = 'duplicate') AS duplicates,
         count(*) FILTER (WHERE behind AND status <> 'duplicate') AS out_of_order,
         coalesce(max(seq) FILTER (WHERE status <> 'duplicate')
                  - min(seq) FILTER (WHERE status <> 'duplicate') + 1
                  - count(DISTINCT seq) FILTER (WHERE status <> 'duplicate'), 0) AS seq_gaps,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY date_part('epoch', received_at - measured_at))
           FILTER (WHERE status <> 'duplicate') AS latency_p50_s,
         min(date_part('epoch', received_at - measured_at))
           FILTER (WHERE status <> 'duplicate')::float8 AS clock_skew_s
  FROM recent GROUP BY device_id
)
SELECT d.external_id AS device, q.last_seen_at, q.envelopes, q.invalid_share, q.duplicates,
       q.out_of_order, q.seq_gaps, q.latency_p50_s, q.clock_skew_s, count(*) OVER () AS matched
FROM q JOIN devices d ON d.id = q.device_id AND d.tenant_id = $1
ORDER BY d.external_id
"""
_BEFORE_TOTALS = """
SELECT status::text, count(*) FROM ingestion_records
WHERE tenant_id = $1 AND received_at > $2::timestamptz - $3::interval AND received_at <= $2
GROUP BY status
"""
_BEFORE_RECENT = """
SELECT m.id, m.received_at, m.measured_at, m.seq, m.status, m.error_code,
       coalesce(split_part(m.subject, '.', -1), st.name) AS topic
FROM devices d JOIN ingestion_records m ON m.device_id = d.id
LEFT JOIN schema_topics st ON st.id = m.schema_topic_id
WHERE d.tenant_id = $1 AND d.external_id = $2
ORDER BY m.received_at DESC, m.id DESC
LIMIT $3
"""
_BEFORE_END_TO_END = """
SELECT count(*) AS envelopes,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY e2e) AS p95
FROM (SELECT extract(epoch FROM created_at - received_at)::float8 AS e2e FROM ingestion_records
      WHERE tenant_id = $1 AND received_at > $2::timestamptz - $3::interval AND received_at <= $2
      ORDER BY received_at DESC LIMIT $4) m
"""

NOW = dt.datetime(2030, 3, 1, 12, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


async def _lean_fleet(pool: Any) -> dict[str, Any]:
    """acme's d1 and d2 and globex's g1, with envelopes recorded as the consumer records them
    since migration 0020 (stages/ingest/plan.py, Recording.add): an envelope that reached
    persist is a message row without tenant, device, schema, measurement or seq, and a
    telemetry row holding them; a duplicate or an envelope refused before persist keeps them on
    its message row."""
    async with pool.acquire() as conn:
        await seed_fleet(conn, "acme", active=["d1", "d2"])
        await seed_fleet(conn, "globex", active=["g1"])
        rows = await conn.fetch("SELECT external_id, id, tenant_id, schema_version_id FROM devices")
        devices = {r["external_id"]: r for r in rows}
        layouts = {
            name: await conn.fetchval(sql.REGISTER_LAYOUT, str(r["schema_version_id"]),
                                      "state", ["temp_c"])
            for name, r in devices.items()
        }  # fmt: skip
        prefix = await conn.fetchval(sql.REGISTER_SUBJECT_PREFIX, "")
        ids: dict[str, int] = {}
        seq_no = 0

        async def persisted(
            name: str,
            device: str,
            minutes: float,
            seq: int | None,
            state: str,
            status: str,
            error: str | None = None,
        ) -> None:
            nonlocal seq_no
            seq_no += 1
            received = NOW - dt.timedelta(minutes=minutes)
            ids[name] = await conn.fetchval(
                "INSERT INTO ingestion_messages (source_deduplication_key, stream_seq, "
                "received_at, subject_prefix, payload_bytes, status, error_code, created_at) "
                "VALUES (gen_random_uuid(), $1, $2::timestamptz, $3, 100, $4, $5, "
                "$2::timestamptz + $6 * interval '1 ms') "
                "RETURNING id",
                seq_no,
                received,
                prefix,
                status,
                error,
                20 + seq_no,
            )
            await conn.execute(
                "INSERT INTO device_telemetry_logs (ingestion_message_id, device_id, "
                "measured_at, seq, received_at, processing_state, values_layout, "
                "parameter_list) VALUES ($1, $2, $3, $4, $5, $6, $7, '[21.5]')",
                ids[name],
                devices[device]["id"],
                received - dt.timedelta(seconds=seq_no),
                seq,
                received,
                state,
                layouts[device],
            )

        async def kept(
            name: str,
            device: str,
            minutes: float,
            seq: int | None,
            status: str,
            *,
            duplicate_of: str | None = None,
            topic: str = "state",
            error: str | None = None,
        ) -> None:
            nonlocal seq_no
            seq_no += 1
            d = devices[device]
            received = NOW - dt.timedelta(minutes=minutes)
            ids[name] = await conn.fetchval(
                "INSERT INTO ingestion_messages (source_deduplication_key, duplicate_of, "
                "stream_seq, received_at, subject, payload_bytes, tenant_id, device_id, "
                "schema_version_id, measured_at, seq, status, error_code, created_at) "
                "VALUES (CASE WHEN $1::bigint IS NULL THEN gen_random_uuid() END, $1, $2, $3, "
                "$4, 100, $5, $6, $7, $8, $9, $10, $11, $3::timestamptz + $12 * interval '1 ms') "
                "RETURNING id",
                None if duplicate_of is None else ids[duplicate_of],
                seq_no,
                received,
                f"telemetry.x.{device}.{topic}",
                d["tenant_id"],
                d["id"],
                None if duplicate_of else d["schema_version_id"],
                None if seq is None else received - dt.timedelta(seconds=2),
                seq,
                status,
                error,
                20 + seq_no,
            )

        await persisted("old", "d1", 90, 0, "processed", "completed")  # before the window
        await persisted("a", "d1", 50, 1, "processed", "completed")
        await persisted("b", "d1", 45, 2, "processed", "completed")
        await kept("b-again", "d1", 40, 2, "duplicate", duplicate_of="b")
        await persisted("e", "d1", 35, 5, "processed", "completed")
        await persisted("d", "d1", 30, 4, "processed", "completed")  # late; 3 never came
        await persisted("f", "d1", 30, 6, "invalid", "failed_validation", "VALIDATION_FAILED")
        await kept("diag", "d1", 25, None, "failed_terminal", topic="diag", error="TOPIC_UNKNOWN")
        await persisted("g", "d1", 20, 7, "publish_failed", "failed_terminal", "PUBLISH_FAILED")
        await persisted(
            "d2", "d2", 10, 1, "inactive_skipped", "inactive_skipped", "DEVICE_INACTIVE"
        )
        await persisted("g1", "g1", 15, 1, "processed", "completed")
        await conn.execute(  # malformed: no tenant resolved
            "INSERT INTO ingestion_messages (source_deduplication_key, stream_seq, received_at, "
            "subject, payload_bytes, status, error_code) VALUES (gen_random_uuid(), 99, $1, "
            "'telemetry.acme.nobody.state', 9, 'failed_terminal', 'JSON_INVALID')",
            NOW - dt.timedelta(minutes=5),
        )
        carried = await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE tenant_id IS NOT NULL"
        )
        assert carried == 2  # the duplicate and the refused envelope keep their ids
        tenants = dict(await conn.fetch("SELECT name, id FROM tenants"))
    return {"ids": ids, "tenants": tenants}


async def test_the_window_statements_read_both_halves_of_the_lean_records(pg_pool: Any) -> None:
    seeded = await _lean_fleet(pg_pool)
    ids, acme, globex = seeded["ids"], seeded["tenants"]["acme"], seeded["tenants"]["globex"]
    async with pg_pool.acquire() as conn:
        figures = await device_quality(conn, acme, now=NOW, window=HOUR, sort="device",
                                       descending=False)  # fmt: skip
        assert figures == [dict(r) for r in await conn.fetch(_BEFORE_DEVICES, acme, NOW, HOUR)]
        d1, d2 = figures
        assert (d1["device"], d1["envelopes"], d1["duplicates"]) == ("d1", 7, 1)
        assert (d1["out_of_order"], d1["seq_gaps"], d1["invalid_share"]) == (1, 1, 1 / 7)
        assert (d2["device"], d2["envelopes"], d2["seq_gaps"]) == ("d2", 1, 0)
        assert d1["last_seen_at"] == NOW - dt.timedelta(minutes=20)

        totals = await fleet_totals(conn, acme, "acme", now=NOW, window=HOUR)
        before = dict(await conn.fetch(_BEFORE_TOTALS, acme, NOW, HOUR))
        assert totals["statuses"] == before == {
            "completed": 4, "duplicate": 1, "failed_validation": 1, "failed_terminal": 2,
            "inactive_skipped": 1,
        }  # fmt: skip
        globex_totals = await fleet_totals(conn, globex, "globex", now=NOW, window=HOUR)
        assert globex_totals["statuses"] == {"completed": 1}

        for limit in (50, 3):
            recent = await recent_messages(conn, acme, "d1", limit=limit)
            assert recent == [dict(r) for r in await conn.fetch(_BEFORE_RECENT, acme, "d1", limit)]
        recent = await recent_messages(conn, acme, "d1", limit=50)
        assert [r["id"] for r in recent] == [
            ids[n] for n in ("g", "diag", "f", "d", "e", "b-again", "b", "a", "old")
        ]  # ties on received_at: the higher id first
        assert [(r["topic"], r["status"], r["error_code"]) for r in recent[:3]] == [
            ("state", "failed_terminal", "PUBLISH_FAILED"),
            ("diag", "failed_terminal", "TOPIC_UNKNOWN"),
            ("state", "failed_validation", "VALIDATION_FAILED"),
        ]
        assert await recent_messages(conn, globex, "d1", limit=50) == []

        for window in (HOUR, dt.timedelta(minutes=22), dt.timedelta(hours=2)):
            e2e = await end_to_end(conn, acme, now=NOW, window=window)
            before = await conn.fetchrow(_BEFORE_END_TO_END, acme, NOW, window, SAMPLE)
            assert e2e == dict(before)
        assert (await end_to_end(conn, acme, now=NOW, window=HOUR))["envelopes"] == 9


async def test_malformed_envelopes_count_for_their_device_and_in_the_charts(
    fleet: Harness,
) -> None:
    """d1 sends two good envelopes and three its subject names but nobody can read (not
    JSON, too large, no ``ts``): they count in d1's figures and in the fleet's totals, which
    then add up to every envelope that arrived; the history's buckets add up to the same."""
    limit = fleet.settings.consumer.max_payload_bytes
    big = b'{"ts": 1, "values": {"blob": "' + b"x" * limit + b'"}}'
    await fleet.publish("d1", envelope(1, 2))
    await fleet.publish("d1", envelope(2, 1))
    await fleet.publish("d1", None, raw=b"{not json")
    await fleet.publish("d1", None, raw=big)
    await fleet.publish("d1", {"seq": 3, "values": good_values()})
    await fleet.publish("d2", envelope(1, 1))
    await fleet.consume(6)
    headers = await key_headers(fleet.pool, "acme")
    async with api_client(fleet.settings, fleet.pool) as client:
        report = await (await client.get("/v1/fleet?sort=invalid_share", headers=headers)).json()
        assert sum(report["statuses"].values()) == 6
        assert report["statuses"]["failed_terminal"] == 3
        sick, healthy = report["devices"]
        assert (sick["device"], sick["envelopes"], sick["invalid_share"]) == ("d1", 5, 3 / 5)
        assert (healthy["device"], healthy["invalid_share"]) == ("d2", 0)
        # Unreadable envelopes have no measurement: d1's latency is its good ones'.
        assert sick["seq_gaps"] == 0 and 0 < sick["latency_p50_s"] < 60
        recent = await (await client.get("/v1/devices/d1/activity", headers=headers)).json()
        assert sorted(m["error_code"] or "" for m in recent["messages"]) == [
            "", "", "ENVELOPE_INVALID", "ENVELOPE_TOO_LARGE", "ENVELOPE_UNPARSEABLE"]

        for range_, bucket_s in (("15m", 15), ("1h", 60), ("6h", 360), ("24h", 1440)):
            resp = await client.get(f"/v1/fleet/history?range={range_}", headers=headers)
            assert resp.status == 200, await resp.text()
            history = await resp.json()
            assert (history["range"], history["bucket_s"]) == (range_, bucket_s)
            buckets = history["buckets"]
            assert len(buckets) == 60
            starts = [dt.datetime.fromisoformat(b["t"]) for b in buckets]
            assert all(t.utcoffset() == dt.timedelta(0) for t in starts)  # times carry a zone
            assert starts == sorted(starts) and starts[0] == dt.datetime.fromisoformat(
                history["since"])
            at = dt.datetime.fromisoformat(history["at"])
            assert starts[-1] <= at < dt.datetime.fromisoformat(history["until"])
            totals: dict[str, int] = {}
            for b in buckets:
                for status, n in b["statuses"].items():
                    totals[status] = totals.get(status, 0) + n
            assert totals == report["statuses"]
            timed = [b for b in buckets if b["sampled"]]
            assert sum(b["sampled"] for b in timed) == 6
            for b in timed:
                assert 0 < b["end_to_end_p50_s"] <= b["end_to_end_p99_s"] < 60
            assert all(b["end_to_end_p50_s"] is None for b in buckets if not b["sampled"])
        bad = await client.get("/v1/fleet/history?range=2h", headers=headers)
        assert bad.status == 400
        other = await key_headers(fleet.pool, "globex")
        empty = await (await client.get("/v1/fleet/history", headers=other)).json()
        assert not any(b["statuses"] for b in empty["buckets"])


async def test_a_malformed_envelope_between_two_hides_no_out_of_order_arrival(
    fleet: Harness,
) -> None:
    """Seq 4 arrives after seq 5 with an unreadable envelope between them: the unreadable one
    has no seq to compare, so the late 4 still counts as out of order."""
    await fleet.publish("d1", envelope(5, 2))
    await fleet.publish("d1", None, raw=b"{not json")
    await fleet.publish("d1", envelope(4, 1))
    await fleet.consume(3)
    headers = await key_headers(fleet.pool, "acme")
    async with api_client(fleet.settings, fleet.pool) as client:
        report = await (await client.get("/v1/fleet", headers=headers)).json()
    [d1] = [d for d in report["devices"] if d["device"] == "d1"]
    assert (d1["envelopes"], d1["out_of_order"]) == (3, 1)
