"""Classification against existing rows, final statuses, and the rows a batch writes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.device_schema import parse_schema_text
from stages.ingest.copy_format import copy_text
from stages.ingest.evaluate import DeviceRecord, Registry, TopicBinding, evaluate
from stages.ingest.ingress import Receipt, key_hash
from stages.ingest.plan import (
    MESSAGE_COPY_COLUMNS,
    STAGE_PASS_COLUMNS,
    TELEMETRY_COLUMNS,
    Existing,
    Fate,
    PublishFailure,
    PublishOutcome,
    Recording,
    classify,
    finalize,
    hot_state_order,
    value_layout,
)
from stages.ingest.processing_state import ProcessingState
from stages.ingest.program import compile_schema
from stages.ingest.status import Status
from streams.ingest.fleet import demo_schema_text

VERSION = uuid.uuid4()
PROGRAMS = compile_schema(parse_schema_text(demo_schema_text("acme")))
DEVICE = DeviceRecord(id=uuid.uuid4(), tenant_id=uuid.uuid4(), tenant="acme", external_id="d1",
                      active=True, schema_version_id=VERSION)
REGISTRY = Registry(
    devices={("acme", "d1"): DEVICE},
    topics={(VERSION, n): TopicBinding(schema_version_id=VERSION, schema_topic_id=uuid.uuid4(),
                                       program=p) for n, p in PROGRAMS.items()},
)
VALUES = {"temp": 21.5, "rh": 40, "pressure_pa": 101325, "bat_mv": 3700, "door": 0,
          "wind": {"speed": 3.2, "dir": 270}, "fw": "a\tb\\c"}
NOW = datetime(2026, 5, 1, tzinfo=UTC)


def _ev(seq: int, *, msg_id: str | None = None, values: dict | None = None, rx: int = 10**18):
    receipt = Receipt.of(subject="telemetry.acme.d1.state",
                      data=orjson.dumps({"ts": 1000, "seq": seq, "values": values or VALUES}),
                      headers={"Nats-Msg-Id": msg_id} if msg_id else None, stream_seq=seq,
                      received_at_ns=rx + seq)
    return evaluate(receipt, REGISTRY, prefix="", max_payload_bytes=65536, capture=False,
                    clock=lambda: 0)


def _existing(ev, *, id: int, same_receipt: bool) -> Existing:
    receipt = ev.receipt
    # The row holds the key's digest (migration 0020), which the dedupe read returns.
    return Existing(id=id, key=ev.key_digest,
                    stream_seq=receipt.stream_seq if same_receipt else 999,
                    received_at=receipt.received_at, status="completed")


def test_classify_new_recorded_and_duplicates() -> None:
    a, b, c = _ev(1, msg_id="a"), _ev(2, msg_id="b"), _ev(3, msg_id="c")
    c_again = _ev(4, msg_id="c")  # a repeat of c inside the same batch
    existing = [_existing(a, id=11, same_receipt=True), _existing(b, id=22, same_receipt=False)]
    fates = classify([a, b, c, c_again], existing)
    assert [f.fate for f in fates] == [Fate.RECORDED, Fate.DUPLICATE, Fate.NEW, Fate.DUPLICATE]
    assert fates[1].owner_id == 22 and fates[1].owner_index is None
    assert fates[3].owner_index == 2 and fates[3].owner_id is None


def test_a_recorded_duplicate_row_makes_its_receipt_recorded() -> None:
    d = _ev(5, msg_id="d")
    dup_row = Existing(id=9, key=None, stream_seq=5, received_at=d.receipt.received_at,
                       status="duplicate")
    owner = Existing(id=3, key=d.key, stream_seq=1, received_at=d.receipt.received_at,
                     status="completed")
    assert [f.fate for f in classify([d], [owner, dup_row])] == [Fate.RECORDED]


def test_publish_failure_turns_completed_into_failed_terminal_with_dead_letter() -> None:
    ev = _ev(1)
    ok = finalize(ev, PublishOutcome(duration_us=5, hot_state_written=True,
                                     analytics_published=True))
    assert (ok.status, ok.state, ok.dead_letter) == (Status.COMPLETED,
                                                      ProcessingState.PROCESSED, False)
    failure = PublishFailure(sink="hot_state", code="REDIS_UNAVAILABLE", message="down",
                             attempts=3)
    bad = finalize(ev, PublishOutcome(duration_us=5, failures=(failure,)))
    assert (bad.status, bad.state, bad.error_code, bad.dead_letter) == (
        Status.FAILED_TERMINAL, ProcessingState.PUBLISH_FAILED, "PUBLISH_FAILED", True)
    assert bad.error_message == "hot_state: down"


def test_recording_lines_have_one_field_per_column_and_escape_text() -> None:
    ev = _ev(1, msg_id="x\\y")
    assert ev.values is not None
    layout = value_layout(finalize(ev, None))
    assert layout == (str(VERSION), "state", tuple(ev.values))
    rec = Recording(capture=False, now=NOW, layouts={layout: 5})
    rec.add(finalize(ev, PublishOutcome(duration_us=7, hot_state_written=True,
                                        analytics_published=True)), 42)
    (message,), (telemetry,) = rec.messages, rec.telemetry
    for line, columns in ((message, MESSAGE_COPY_COLUMNS), (telemetry, TELEMETRY_COLUMNS)):
        assert line.endswith("\n") and line.count("\t") == len(columns) - 1
    fields = dict(zip(MESSAGE_COPY_COLUMNS, message[:-1].split("\t"), strict=True))
    # The key's digest (migration 0020), not its text.
    assert fields["id"] == "42" and fields["source_deduplication_key"] == key_hash("m:acme:x\\y")
    assert fields["status"] == "completed" and fields["error_code"] == "\\N"
    # What the telemetry row holds is left out of the message row (migration 0020).
    carried = ("tenant_id", "device_id", "schema_version_id", "schema_topic_id", "measured_at",
               "seq")
    assert [fields[c] for c in carried] == ["\\N"] * 6
    values = dict(zip(TELEMETRY_COLUMNS, telemetry[:-1].split("\t"), strict=True))
    # The values without their keys, in the order of the layout's key list (migration 0017).
    # COPY text doubles backslashes; undoing that gives the JSON, which keeps the tab escaped.
    assert values["values_layout"] == "5"
    decoded = orjson.loads(values["parameter_list"].replace("\\\\", "\\"))
    assert dict(zip(layout[2], decoded, strict=True)) == ev.values
    assert ev.values["firmware"] == "a\tb\\c" and values["processing_state"] == "processed"
    assert not {"tenant_id", "schema_version_id", "topic"} & values.keys()
    assert values["device_id"] == str(DEVICE.id) and values["measured_at"] != "\\N"
    (line,) = rec.stage_pass_lines(persist_us=99)
    assert line.endswith("\n") and line.count("\t") == len(STAGE_PASS_COLUMNS) - 1
    passed = dict(zip(STAGE_PASS_COLUMNS, line[:-1].split("\t"), strict=True))
    # One row for the transaction's passes (migration 0019): here a single pass.
    assert passed["message_ids"] == "{42}" and passed["attempt"] == "1"
    assert passed["message_id_min"] == passed["message_id_max"] == "42"
    assert passed["stages"] == "{63}"  # all six stages reached (bits 0-5)
    assert passed["failed"] == "{0}"
    # Six slots per pass, one per stage in order: ..., persist 99 µs, publish 7.
    durations = passed["durations"].strip("{}").split(",")
    assert len(durations) == 6 and durations[4:] == ["99", "7"]
    assert passed["error_codes"] == passed["error_messages"] == "\\N"
    assert rec.dead_letters == []


def test_a_subject_the_ids_spell_is_left_out_of_the_message_row() -> None:
    ok = finalize(_ev(1, msg_id="s"), PublishOutcome(duration_us=1))
    layout = value_layout(ok)
    assert layout is not None
    spelled = Recording(capture=False, now=NOW, layouts={layout: 1}, prefix="", prefix_id=3)
    spelled.add(ok, 1)
    # Another namespace's prefix: this subject is not what it spells, so it is kept.
    other = Recording(capture=False, now=NOW, layouts={layout: 1}, prefix="ns.", prefix_id=4)
    other.add(ok, 1)
    unknown = Recording(capture=False, now=NOW, prefix="", prefix_id=3)
    unknown.add(finalize(evaluate(
        Receipt.of(subject="telemetry.acme.nobody.state", data=b"{}", headers=None,
                   stream_seq=9, received_at_ns=10**18),
        REGISTRY, prefix="", max_payload_bytes=65536, capture=False, clock=lambda: 0), None), 2)
    rows = [dict(zip(MESSAGE_COPY_COLUMNS, r.messages[0][:-1].split("\t"), strict=True))
            for r in (spelled, other, unknown)]
    assert [(r["subject"], r["subject_prefix"]) for r in rows] == [
        ("\\N", "3"), ("telemetry.acme.d1.state", "\\N"),
        ("telemetry.acme.nobody.state", "\\N")]


def test_failed_publish_records_a_dead_letter_with_the_original_envelope() -> None:
    ev = _ev(1, msg_id="z")
    failure = PublishFailure(sink="analytics", code="CLICKHOUSE_ERROR", message="no",
                             attempts=2)
    rec = Recording(capture=False, now=NOW,
                    layouts={(str(VERSION), "state", tuple(ev.values or ())): 1})
    rec.add(finalize(ev, PublishOutcome(duration_us=1, failures=(failure,))), 7)
    (row,) = rec.dead_letters
    assert row[0] == 7 and row[4] == ev.receipt.data and row[5] == "PUBLISH_FAILED"
    assert orjson.loads(row[3]) == {"Nats-Msg-Id": "z"}
    assert orjson.loads(row[6])[0]["code"] == "CLICKHOUSE_ERROR"
    (line,) = rec.stage_pass_lines(1)
    passed = dict(zip(STAGE_PASS_COLUMNS, line[:-1].split("\t"), strict=True))
    assert int(passed["stages"].strip("{}")) & 0b110000 == 0b110000  # persist, publish
    assert passed["failed"] == "{32}"  # publish failed
    assert passed["error_codes"] == "{NULL,NULL,NULL,NULL,NULL,\"PUBLISH_FAILED\"}"
    assert passed["error_messages"].endswith(',"analytics: no"}')


@pytest.mark.parametrize(
    ("raw", "copied"),
    [(None, "\\N"), ("plain", "plain"), ("a\tb", "a\\tb"), ("a\nb\r", "a\\nb\\r"),
     ("back\\slash", "back\\\\slash"), ("nul\x00", "nul\\\\u0000")],
)
def test_copy_text_escaping(raw: str | None, copied: str) -> None:
    assert copy_text(raw) == copied


@given(st.integers(0, 2**62), st.one_of(st.none(), st.integers(0, 2**62)),
       st.integers(0, 2**62), st.one_of(st.none(), st.integers(0, 2**62)))
def test_hot_state_order_compares_like_ts_then_seq(ts1: int, s1: int | None, ts2: int,
                                                  s2: int | None) -> None:
    key1, key2 = (ts1, -1 if s1 is None else s1), (ts2, -1 if s2 is None else s2)
    assert (hot_state_order(ts1, s1) < hot_state_order(ts2, s2)) == (key1 < key2)
    assert (hot_state_order(ts1, s1) == hot_state_order(ts2, s2)) == (key1 == key2)
