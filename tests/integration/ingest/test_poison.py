"""A poison envelope cannot stop the batch it arrived in."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from urllib.parse import urlparse

from stages.ingest.ingress import key_hash
from stages.ingest.plan import hot_state_order
from tests.integration.ingest.conftest import TENANT, Harness, good_values


async def _refuse_poison_firmware(fleet: Harness) -> None:
    """A real refusal from Postgres for exactly the envelopes whose firmware is "poison"."""
    async with fleet.pool.acquire() as conn:
        await conn.execute(
            "ALTER TABLE device_telemetry_logs ADD CONSTRAINT test_poison "
            "CHECK (telemetry_values(values_layout, parameter_list)->>'firmware'"
            " IS DISTINCT FROM 'poison')"
        )


async def test_a_row_postgres_refuses_is_isolated_and_dead_lettered(fleet: Harness) -> None:
    await _refuse_poison_firmware(fleet)
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


async def test_a_refused_envelope_is_taken_back_out_of_the_hot_state_and_analytics(
    fleet: Harness,
) -> None:
    """Publishing comes before the recording transaction, so the refused envelope (here the
    newest of its device, so the one the hot state took) was already published; nothing may
    stay published without a record."""
    await _refuse_poison_firmware(fleet)
    seqs = []
    for i in range(4):
        values = {**good_values(temp=10 + i), "fw": "poison" if i == 3 else "1.0"}
        seqs.append(await fleet.publish("d1", {"ts": 1000 + i, "seq": i, "values": values}))
    # d2's only envelope is refused: its topic is cleared, not left holding it.
    lone = await fleet.publish("d2", {"ts": 5000, "values": {**good_values(), "fw": "poison"}})
    await fleet.consume(5)
    rows = [await fleet.message(s) for s in seqs]
    assert [r["status"] for r in rows] == ["completed"] * 3 + ["failed_terminal"]
    assert (await fleet.message(lone))["error_code"] == "PERSIST_REJECTED"
    kept = rows[2]
    state = (await fleet.hot_state("d1"))["state"]
    # Put back from Postgres, which keeps the key's digest (migration 0020).
    assert (state["seq"], state["message_key"]) == (2, kept["source_deduplication_key"].hex)
    assert state["values"]["firmware"] == "1.0" and state["values"]["temp_c"] == 12
    assert state["ts"] == "1970-01-01T00:00:01.002000+00:00"
    assert state["received_at"] == kept["received_at"].isoformat()
    raw = await fleet.redis.hget(fleet.names.hot_state_key(TENANT, "d1"), "state@order")
    assert raw == hot_state_order(1_002_000, 2).encode()
    assert await fleet.hot_state("d2") == {}
    assert await fleet.analytics_rows(rows[3]["source_deduplication_key"]) == 0
    assert await fleet.analytics_rows(kept["source_deduplication_key"]) > 0


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
    # A message id that is not plain text is keyed by its SHA-256 (the row: the key's digest).
    msg_id = hashlib.sha256(b"n\x00").hexdigest()
    assert row["source_deduplication_key"].hex == key_hash(f"m:?:sha256:{msg_id}")
    assert (await fleet.message(good))["status"] == "completed"
    async with fleet.pool.acquire() as conn:
        headers = await conn.fetchval(
            "SELECT headers FROM dead_letters WHERE ingestion_message_id = $1", row["id"]
        )
    assert headers["traceparent"] == "x\\u0000y"


def _raw_publish(url: str, subject: bytes, data: bytes) -> None:
    """Publish with the bare NATS protocol: clients other than nats-py send any bytes."""
    where = urlparse(url)
    with socket.create_connection((where.hostname or "127.0.0.1", where.port or 4222), 5) as s:
        s.recv(4096)  # INFO
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPUB ' + subject
                  + b" %d\r\n" % len(data) + data + b"\r\nPING\r\n")
        assert b"PONG" in s.recv(4096)


async def test_a_subject_that_is_not_utf8_is_recorded_and_does_not_stop_the_reader(
    fleet: Harness,
) -> None:
    """The subject is decoded inside nats-py's read loop, which stops reading for good when
    anything there raises: one such message used to stall every consumer in turn."""
    first = await fleet.publish("d1", {"ts": 1, "values": good_values()})
    subject = fleet.names.telemetry_subject("acme", "dZZ", "state").encode()
    await asyncio.to_thread(_raw_publish, fleet.settings.nats_url,
                            subject.replace(b"dZZ", b"d\xff1"), b'{"ts": 2, "values": {}}')
    last = await fleet.publish("d1", {"ts": 3, "values": good_values()})
    await fleet.consume(3, within=15)
    assert (await fleet.message(first))["status"] == "completed"
    assert (await fleet.message(last))["status"] == "completed"
    async with fleet.pool.acquire() as conn:
        rows = await conn.fetch("SELECT * FROM ingestion_messages WHERE stream_seq <> ALL($1)",
                                [first, last])
    assert [(r["status"], r["error_code"]) for r in rows] == [
        ("failed_terminal", "SUBJECT_INVALID")]
    assert "d\\xff1" in rows[0]["subject"]
