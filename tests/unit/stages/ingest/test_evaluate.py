"""One envelope through ingress → validate → mutate → derive, every early exit included."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import orjson
import pytest

from schemas.device_schema import parse_schema_text
from stages.ingest.evaluate import DeviceRecord, Registry, TopicBinding, evaluate
from stages.ingest.ingress import Receipt
from stages.ingest.processing_state import ProcessingState
from stages.ingest.program import compile_schema
from stages.ingest.status import Status
from streams.ingest.fleet import demo_schema_text

VERSION = uuid.uuid4()
TOPIC_ID = uuid.uuid4()
PROGRAMS = compile_schema(parse_schema_text(demo_schema_text("acme")))


def _device(
    external_id: str, *, active: bool = True, version: uuid.UUID | None = VERSION
) -> DeviceRecord:
    return DeviceRecord(
        id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        tenant="acme",
        external_id=external_id,
        active=active,
        schema_version_id=version,
    )


REGISTRY = Registry(
    devices={
        ("acme", "d1"): _device("d1"),
        ("acme", "off"): _device("off", active=False),
        ("acme", "bare"): _device("bare", version=None),
    },
    topics={
        (VERSION, name): TopicBinding(
            schema_version_id=VERSION, schema_topic_id=TOPIC_ID, program=program
        )
        for name, program in PROGRAMS.items()
    },
)
GOOD_VALUES: dict[str, Any] = {
    "temp": 21.5,
    "rh": 40,
    "pressure_pa": 101325,
    "bat_mv": 3700,
    "door": 0,
    "wind": {"speed": 3.2, "dir": 270},
    "fw": "1.0",
}
_ticks = itertools.count(0, 7_000)  # each clock read advances 7 µs


def _run(
    payload: Any,
    *,
    device: str = "d1",
    topic: str = "state",
    capture: bool = False,
    msg_id: str | None = None,
    raw: bytes | None = None,
    limit: int = 65536,
):
    data = raw if raw is not None else orjson.dumps(payload)
    receipt = Receipt.of(
        subject=f"ns.telemetry.acme.{device}.{topic}",
        data=data,
        headers={"Nats-Msg-Id": msg_id} if msg_id else None,
        stream_seq=5,
        received_at_ns=1_700_000_000_123_456_789,
    )
    return evaluate(
        receipt,
        REGISTRY,
        prefix="ns",
        max_payload_bytes=limit,
        capture=capture,
        clock=lambda: next(_ticks),
    )


def _stages(ev) -> list[tuple[str, str]]:
    return [(log.stage, log.status) for log in ev.logs]


def test_a_good_envelope_runs_every_pure_stage() -> None:
    ev = _run({"ts": 1_700_000_000_000, "seq": 3, "values": GOOD_VALUES})
    assert ev.status is Status.COMPLETED and ev.needs_publish
    assert ev.state is ProcessingState.PROCESSED and ev.error_code is None
    assert _stages(ev) == [
        ("ingress", "ok"),
        ("validate", "ok"),
        ("mutate", "ok"),
        ("derive", "ok"),
    ]
    assert ev.values is not None
    assert ev.values["pressure_hpa"] == pytest.approx(1013.25)
    assert ev.values["battery_v"] == pytest.approx(3.7)
    assert ev.values["temp_f"] == pytest.approx(70.7)
    assert len(ev.values) == 10
    assert all(log.duration_us == 7 for log in ev.logs)  # measured with the injected clock
    assert all(log.input_snapshot is None and log.output_snapshot is None for log in ev.logs)
    assert ev.key == "r:acme:1700000000123456789:5" and not ev.dead_letter


def test_msg_id_makes_a_stable_key() -> None:
    ev = _run({"ts": 1, "values": GOOD_VALUES}, msg_id="abc-1")
    assert ev.key == "m:acme:abc-1"


def test_snapshots_only_when_capture_is_on() -> None:
    ev = _run({"ts": 1, "values": GOOD_VALUES}, capture=True)
    by_stage = {log.stage: log for log in ev.logs}
    assert by_stage["validate"].input_snapshot == GOOD_VALUES
    assert by_stage["mutate"].output_snapshot["change_set"]["battery_v"] == (3700.0, 3.7)
    assert by_stage["derive"].output_snapshot["final_values"] == ev.values
    assert by_stage["ingress"].output_snapshot["schema_version_topic_id"] == str(TOPIC_ID)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"raw": b"x" * 300, "limit": 256}, "ENVELOPE_TOO_LARGE"),
        ({"raw": b"{not json"}, "ENVELOPE_UNPARSEABLE"),
        ({"payload": {"values": {}}}, "ENVELOPE_INVALID"),
    ],
)
def test_malformed_envelopes_are_dead_lettered(kwargs: dict[str, Any], code: str) -> None:
    ev = _run(kwargs.pop("payload", None), **kwargs)
    assert (ev.status, ev.error_code, ev.dead_letter) == (Status.FAILED_TERMINAL, code, True)
    assert _stages(ev) == [("ingress", "failed")] and ev.logs[0].error_code == code
    assert ev.state is None and ev.values is None


@pytest.mark.parametrize(
    ("device", "topic", "code"),
    [
        ("ghost", "state", "UNKNOWN_DEVICE"),
        ("bare", "state", "DEVICE_NO_SCHEMA_VERSION"),
        ("d1", "diagnostics", "UNKNOWN_TOPIC"),
    ],
)
def test_ingress_rejections_stop_after_ingress(device: str, topic: str, code: str) -> None:
    ev = _run({"ts": 1, "values": GOOD_VALUES}, device=device, topic=topic)
    assert (ev.status, ev.error_code, ev.dead_letter) == (Status.FAILED_TERMINAL, code, False)
    assert _stages(ev) == [("ingress", "failed")] and ev.state is None


@pytest.mark.parametrize("temp", [150.0, None])
def test_failed_critical_or_required_check_is_failed_validation(temp: float | None) -> None:
    values = {k: v for k, v in GOOD_VALUES.items() if k != "temp"}
    if temp is not None:
        values["temp"] = temp
    ev = _run({"ts": 1, "values": values})
    assert ev.status is Status.FAILED_VALIDATION and ev.error_code == "VALIDATION_FAILED"
    assert ev.state is ProcessingState.INVALID and not ev.needs_publish
    assert _stages(ev) == [("ingress", "ok"), ("validate", "failed")]
    assert ev.values is not None and "temp_c" in ev.values and "temp_f" not in ev.values
    assert ev.issues and ev.issues[0].parameter == "temp_c"


def test_inactive_device_is_validated_then_skipped() -> None:
    ev = _run({"ts": 1, "values": GOOD_VALUES}, device="off")
    assert ev.status is Status.INACTIVE_SKIPPED and ev.state is ProcessingState.INACTIVE_SKIPPED
    assert _stages(ev) == [("ingress", "ok"), ("validate", "ok")]
    assert not ev.needs_publish and not ev.dead_letter


def test_non_critical_issues_do_not_fail_the_envelope() -> None:
    ev = _run({"ts": 1, "values": {**GOOD_VALUES, "rh": 140, "door": "open"}})
    assert ev.status is Status.COMPLETED
    assert {i.code for i in ev.issues} == {"OUT_OF_RANGE", "WRONG_TYPE"}
    assert ev.values is not None and ev.values["door_open"] is None


def test_a_stage_bug_becomes_internal_error_not_an_exception() -> None:
    class Exploding(dict[str, Any]):
        def get(self, *_: Any) -> Any:
            raise RuntimeError("boom")

    broken = Registry(devices=Exploding(), topics={})
    receipt = Receipt.of(
        subject="telemetry.acme.d1.state",
        data=b'{"ts":1,"values":{}}',
        headers=None,
        stream_seq=1,
        received_at_ns=1,
    )
    ev = evaluate(
        receipt, broken, prefix="", max_payload_bytes=1000, capture=False, clock=lambda: 0
    )
    assert (ev.status, ev.error_code, ev.dead_letter) == (
        Status.FAILED_TERMINAL,
        "INTERNAL_ERROR",
        True,
    )
    # The stage, the class and where it was raised; never the exception's text, which may
    # quote the envelope's data.
    assert ev.error_message is not None
    assert ev.error_message.startswith("ingress: RuntimeError at ")
    assert "(get), from stages.ingest.evaluate:" in ev.error_message
    assert "boom" not in ev.error_message


def test_an_expression_failing_on_this_data_is_failed_validation() -> None:
    schema = parse_schema_text(
        "schema: ratio\ntenant: acme\ntopics:\n  - name: state\n    parameters:\n"
        "      - {name: a, type: number, required: true}\n"
        "      - {name: b, type: number, mutate: '1 / value'}\n"
        "      - {name: c, type: number, derived: 'sqrt(a)'}\n"
    )
    version, topic = uuid.uuid4(), uuid.uuid4()
    registry = Registry(
        devices={("acme", "d1"): _device("d1", version=version)},
        topics={(version, "state"): TopicBinding(schema_version_id=version,
                                                 schema_topic_id=topic,
                                                 program=compile_schema(schema)["state"])},
    )

    def run(values: dict[str, Any]):
        receipt = Receipt.of(subject="telemetry.acme.d1.state",
                             data=orjson.dumps({"ts": 1, "values": values}), headers=None,
                             stream_seq=1, received_at_ns=1)
        return evaluate(receipt, registry, prefix="", max_payload_bytes=4096, capture=False,
                        clock=lambda: 0)

    divided = run({"a": 4, "b": 0})
    assert divided.status is Status.FAILED_VALIDATION
    assert divided.error_code == "EVAL_DIVISION_BY_ZERO"
    assert _stages(divided) == [("ingress", "ok"), ("validate", "ok"), ("mutate", "failed")]
    assert divided.state is ProcessingState.INVALID
    rooted = run({"a": -4, "b": 2})
    assert rooted.error_code == "EVAL_DOMAIN" and _stages(rooted)[-1] == ("derive", "failed")
    fine = run({"a": 4, "b": 2})
    assert fine.status is Status.COMPLETED and fine.values == {"a": 4.0, "b": 0.5, "c": 2.0}


@pytest.mark.parametrize(
    ("device", "topic", "values"),
    [
        ("d1", "state", GOOD_VALUES),
        ("d1", "state", {**GOOD_VALUES, "rh": 140}),
        ("d1", "state", {**GOOD_VALUES, "temp": 150.0}),
        ("d1", "state", {k: v for k, v in GOOD_VALUES.items() if k != "temp"}),
        ("off", "state", GOOD_VALUES),
        ("bare", "state", GOOD_VALUES),
        ("ghost", "state", GOOD_VALUES),
        ("d1", "diagnostics", GOOD_VALUES),
        ("d1", "gps", {"lat": 1.5, "lon": 2.5}),
    ],
)
def test_the_fast_path_agrees_with_the_full_evaluation(device: str, topic: str,
                                                        values: dict[str, Any]) -> None:
    from stages.ingest.evaluate import evaluate_fully
    from stages.ingest.ingress import parse_subject

    receipt = Receipt.of(subject=f"telemetry.acme.{device}.{topic}",
                         data=orjson.dumps({"ts": 5, "seq": 2, "values": values}),
                         headers={"Nats-Msg-Id": "m-1"}, stream_seq=3, received_at_ns=7)
    fast = evaluate(receipt, REGISTRY, prefix="", max_payload_bytes=65536, capture=False,
                    clock=lambda: 0)
    full = evaluate_fully(receipt, REGISTRY, parts=parse_subject(receipt.subject),
                          max_payload_bytes=65536, capture=False, clock=lambda: 0)
    assert fast == full
