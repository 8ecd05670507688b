"""No envelope value in any error message, stage log, dead letter or log line (spec 000 §15).

Hostile envelopes carry distinctive coordinates (``51.123456789``, ``-0.987654321``) and a marker
string into every way the streaming pipeline can refuse one: a value out of range, of the wrong
type or too large for a float, a mutation and a derivation failing on it, a body that is not JSON
or not UTF-8, and a row Postgres refuses (whose own message quotes the failing row). Every
message must name the parameter, its source and the kind of problem, and hold none of those
digits; the digits stay where values belong (the telemetry row, the dead letter's payload and,
when capture is on, the stage snapshots).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import asyncpg
import orjson
import pytest

from schemas.device_schema import parse_schema_text
from streams import registry
from tests.integration.ingest.conftest import TENANT, Harness
from tests.integration.json_logs import captured_json_logs

MARKER = "ZZ-SPY-MARKER-ZZ"
LEAKS = ("123456789", "987654321", "51.1234", "0.98765", MARKER)
"""What a leaked value would show: the coordinates' digit runs, at any precision, and the marker."""

SCHEMA = """\
schema: spy-tracker
tenant: {tenant}
description: Hostile inputs whose values must never reach an error message.
topics:
  - name: fix
    parameters:
      - {{name: lat, type: number, required: true, critical: true, min: -90, max: 90}}
      - {{name: lon, type: number, required: true, critical: true, min: -180, max: 180}}
      - {{name: lat_e7, source: pos.lat_e7, type: integer, critical: true}}
      - {{name: label, type: string}}
      - {{name: moving, type: boolean, critical: true}}
  - name: conv
    parameters:
      - {{name: label, type: string}}
      - {{name: lat, type: number, derived: "number(label)"}}
  - name: root
    parameters:
      - {{name: lon, type: number, mutate: "sqrt(value)"}}
  - name: power
    parameters:
      - {{name: base, type: integer}}
      - {{name: exp, type: integer}}
      - {{name: big, type: number, derived: "base ** exp"}}
"""
DEVICE = "spy-1"
FIX = {"lat": 51.5, "lon": -0.1}  # a fine fix, for the cases that spoil one field
TS = 1_700_000_000_000


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    with captured_json_logs("DEBUG") as out:
        yield out


async def _spy_fleet(fleet: Harness) -> None:
    text = SCHEMA.format(tenant=TENANT)
    async with fleet.pool.acquire() as conn:
        await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
        await registry.add_device(conn, TENANT, DEVICE, schema="spy-tracker")
        # A real refusal from Postgres, whose message quotes the failing row (its values).
        await conn.execute(
            "ALTER TABLE device_telemetry_logs ADD CONSTRAINT test_no_marker "
            "CHECK (telemetry_values(values_layout, parameter_list)->>'label'"
            f" IS DISTINCT FROM '{MARKER} 51.123456789')"
        )


def _raw(values: str) -> bytes:
    """An envelope body whose ``values`` are spelled exactly as given."""
    return b'{"ts": %d, "values": %s}' % (TS, values.encode())


async def _publish_hostile(fleet: Harness) -> dict[int, tuple[str, str]]:
    """Every hostile envelope, by stream sequence: the (status, error code) it must end in."""
    cases: list[tuple[str, Any, bytes | None, str, str]] = [
        # (topic, values, raw body, status, error code)
        ("fix", {**FIX, "lat": 91.123456789}, None, "failed_validation", "VALIDATION_FAILED"),
        ("fix", {**FIX, "lon": -180.987654321}, None, "failed_validation", "VALIDATION_FAILED"),
        ("fix", {**FIX, "lat": "51.123456789"}, None, "failed_validation", "VALIDATION_FAILED"),
        ("fix", {**FIX, "pos": {"lat_e7": 5.123456789}}, None, "failed_validation",
         "VALIDATION_FAILED"),
        ("fix", {**FIX, "moving": f"{MARKER} -0.987654321"}, None, "failed_validation",
         "VALIDATION_FAILED"),
        ("fix", None, _raw('{"lat": 123456789123456789e400, "lon": -0.987654321}'),
         "failed_validation", "VALIDATION_FAILED"),
        ("conv", {"label": f"51.123456789N {MARKER}"}, None, "failed_validation",
         "EVAL_CONVERSION"),
        ("root", {"lon": -0.987654321}, None, "failed_validation", "EVAL_DOMAIN"),
        ("power", {"base": 3, "exp": 987654321}, None, "failed_validation", "EVAL_OVERFLOW"),
        ("fix", None, _raw('{"lat": 51.123456789, "lon": -0.987654321,}'), "failed_terminal",
         "ENVELOPE_UNPARSEABLE"),
        ("fix", None, b'{"ts": 1, "values": {"label": "51.123456789 \xff"}}', "failed_terminal",
         "ENVELOPE_UNPARSEABLE"),
        ("fix", None, b'{"ts": "51.123456789", "values": {}}', "failed_terminal",
         "ENVELOPE_INVALID"),
        ("fix", None, b'{"ts": 1, "values": [51.123456789, -0.987654321]}', "failed_terminal",
         "ENVELOPE_INVALID"),
        ("fix", {**FIX, "lat": 51.123456789, "label": f"{MARKER} 51.123456789"}, None,
         "failed_terminal", "PERSIST_REJECTED"),
        ("fix", FIX, None, "completed", ""),  # and a good one beside them
    ]
    expected = {}
    for topic, values, raw, status, code in cases:
        body = {"ts": TS, "values": values} if raw is None else None
        seq = await fleet.publish(DEVICE, body, topic=topic, raw=raw)
        expected[seq] = (status, code)
    return expected


def _leaks(texts: list[str]) -> list[tuple[str, str]]:
    return [(leak, text[:300]) for text in texts for leak in LEAKS if leak in text]


async def test_no_value_of_a_hostile_envelope_reaches_an_error_or_a_log_line(
    fleet: Harness, captured: io.StringIO
) -> None:
    await _spy_fleet(fleet)
    expected = await _publish_hostile(fleet)
    await fleet.consume(len(expected), within=30)

    async with fleet.pool.acquire() as conn:
        messages = await conn.fetch(
            "SELECT * FROM ingestion_messages WHERE stream_seq = ANY($1) ORDER BY stream_seq",
            list(expected),
        )
        ids = [m["id"] for m in messages]
        stage_logs = await conn.fetch(
            "SELECT * FROM ingestion_stage_logs WHERE message_id = ANY($1)", ids)
        issues = await conn.fetch(
            "SELECT validation_issues FROM device_telemetry_logs "
            "WHERE ingestion_message_id = ANY($1) AND validation_issues IS NOT NULL", ids)
        dead = await conn.fetch(
            "SELECT * FROM dead_letters WHERE ingestion_message_id = ANY($1)", ids)
        values = await conn.fetch(
            "SELECT telemetry_values(values_layout, parameter_list)::text AS v "
            "FROM device_telemetry_logs WHERE ingestion_message_id = ANY($1)", ids)

    # Every path was taken: each hostile envelope ended where it should.
    got = {m["stream_seq"]: (m["status"], m["error_code"] or "") for m in messages}
    assert got == expected
    refusals = [m["error_message"] for m in messages if m["error_message"]]
    assert len(refusals) == len(expected) - 1
    # The messages name the field and the kind of problem...
    assert any("'lat' (source 'lat') is outside [-90, 90] (above it)" in m for m in refusals)
    assert any("'lat_e7' (source 'pos.lat_e7'): expected an integer" in m for m in refusals)
    assert any("'lat' (source 'lat'): number is outside the range of a 64-bit float" in m
               for m in refusals)
    assert any("derive 'lat': cannot convert a string that is not a number" in m
               for m in refusals)
    assert any(m.startswith("payload is not JSON: ") and " column " in m for m in refusals)
    assert any("constraint test_no_marker" in m and "SQLSTATE 23514" in m for m in refusals)
    # ...and never the value, wherever a message is kept or written.
    texts = [
        *(str(dict(m)) for m in messages),
        *(str(dict(s)) for s in stage_logs),  # capture is off: no snapshots either
        *(str(i["validation_issues"]) for i in issues),
        *(str({k: v for k, v in dict(d).items() if k != "payload"}) for d in dead),
        *captured.getvalue().splitlines(),
    ]
    assert len(stage_logs) > len(expected) and len(dead) >= 5
    assert not _leaks(texts), _leaks(texts)[:5]
    # The values themselves are kept where values belong: the telemetry row and the payload.
    assert any("51.123456789" in v["v"] for v in values)
    assert all(b"51.123456789" in d["payload"] or b"987654321" in d["payload"] for d in dead)


async def test_snapshots_keep_raw_values_but_the_messages_beside_them_do_not(
    fleet: Harness,
) -> None:
    """Opt-in snapshots are the one place of the stage logs that holds values (the docs say so);
    the error message in the same row still holds none."""
    await _spy_fleet(fleet)
    consumer = fleet.settings.consumer.model_copy(update={"capture_stage_snapshots": True})
    settings = fleet.settings.model_copy(update={"consumer": consumer})
    seq = await fleet.publish(DEVICE, {"ts": TS, "values": {**FIX, "lat": 91.123456789}},
                              topic="fix")
    await fleet.consume(1, settings=settings)
    row = await fleet.message(seq)
    async with fleet.pool.acquire() as conn:
        log: asyncpg.Record = await conn.fetchrow(
            "SELECT * FROM ingestion_stage_logs WHERE message_id = $1 AND stage = 'validate'",
            row["id"])
    assert (log["status"], log["error_code"]) == ("failed", "VALIDATION_FAILED")
    assert "'lat'" in log["error_message"] and not _leaks([log["error_message"]])
    assert "91.123456789" in orjson.dumps(log["input_snapshot"]).decode()
