"""Wire-contract edges end to end: numbers beyond float64 and invalid W3C trace contexts."""

from __future__ import annotations

from typing import Any

import orjson

from tests.integration.ingest.conftest import TENANT, Harness, good_values

DIGITS_400 = "1" + "0" * 400


def _with_huge(key: str, literal: str, *, ts: int = 1_700_000_000_000) -> bytes:
    """An envelope of good values whose ``key`` holds ``literal`` as written (orjson cannot
    write such a number itself)."""
    marker = "@@huge@@"
    body = orjson.dumps({"ts": ts, "values": {**good_values(), key: marker}})
    return body.replace(b'"' + marker.encode() + b'"', literal.encode())


async def _issues(fleet: Harness, message_id: int) -> list[tuple[str, str, bool]]:
    telemetry = await fleet.telemetry(message_id)
    assert telemetry is not None
    return [(i["parameter"], i["code"], i["critical"])
            for i in telemetry["validation_issues"] or []]


async def test_a_huge_number_is_a_bad_value_of_its_parameter_not_an_unparseable_body(
    fleet: Harness,
) -> None:
    optional = {literal: await fleet.publish("d1", None, raw=_with_huge("rh", literal, ts=n))
                for n, literal in enumerate(["1e309", "-1e309", DIGITS_400], start=1)}
    critical = await fleet.publish("d2", None, raw=_with_huge("temp", "-1e309"))
    in_ts = await fleet.publish("d2", None, raw=b'{"ts": 1e309, "values": {"temp": 20}}')
    await fleet.consume(5)

    for seq in optional.values():
        row = await fleet.message(seq)
        assert (row["status"], row["error_code"]) == ("completed", None)
        assert [stage for stage, status, _ in await fleet.stages(row["id"])
                if status == "ok"] == ["ingress", "validate", "mutate", "derive", "persist",
                                       "publish"]
        assert await _issues(fleet, row["id"]) == [("humidity", "NUMBER_TOO_LARGE", False)]
        telemetry = await fleet.telemetry(row["id"])
        assert telemetry is not None and telemetry["processing_state"] == "processed"
        assert telemetry["parameter_values"]["humidity"] is None
        assert telemetry["parameter_values"]["temp_c"] == 21.5
    state = (await fleet.hot_state("d1"))["state"]
    assert state["values"]["humidity"] is None and state["values"]["temp_f"] == 70.7

    row = await fleet.message(critical)
    assert (row["status"], row["error_code"]) == ("failed_validation", "VALIDATION_FAILED")
    assert await fleet.stages(row["id"]) == [("ingress", "ok", None),
                                             ("validate", "failed", "VALIDATION_FAILED"),
                                             ("persist", "ok", None)]
    assert await _issues(fleet, row["id"]) == [("temp_c", "NUMBER_TOO_LARGE", True)]
    assert (await fleet.telemetry(row["id"]))["processing_state"] == "invalid"

    row = await fleet.message(in_ts)  # the envelope's own fields: the contract is broken
    assert (row["status"], row["error_code"]) == ("failed_terminal", "ENVELOPE_INVALID")
    async with fleet.pool.acquire() as conn:
        reasons = await conn.fetch("SELECT reason_code FROM dead_letters")
    assert [r["reason_code"] for r in reasons] == ["ENVELOPE_INVALID"]


async def test_a_huge_number_in_a_stage_snapshot_is_recorded(fleet: Harness) -> None:
    consumer = fleet.settings.consumer.model_copy(update={"capture_stage_snapshots": True})
    settings = fleet.settings.model_copy(update={"consumer": consumer})
    seq = await fleet.publish("d1", None, raw=_with_huge("rh", "1e309"))
    await fleet.consume(1, settings=settings)
    row = await fleet.message(seq)
    assert row["status"] == "completed"
    async with fleet.pool.acquire() as conn:
        snapshot: Any = await conn.fetchval(
            "SELECT input_snapshot FROM ingestion_stage_logs WHERE message_id = $1 "
            "AND stage = 'validate'", row["id"])
    assert snapshot["rh"] == "1e309"  # as written (JSON has no number it could be)


async def test_only_valid_traceparents_are_recorded(fleet: Harness) -> None:
    valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    sent = {
        "valid": valid,
        "zero trace id": "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "zero parent id": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "version ff": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "malformed": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
    }
    js = fleet.nc.jetstream()
    subject = fleet.names.telemetry_subject(TENANT, "d1", "state")
    seqs = {}
    for n, (case, traceparent) in enumerate(sent.items(), start=1):
        body = orjson.dumps({"ts": n, "values": good_values()})
        seqs[case] = (await js.publish(subject, body, headers={"traceparent": traceparent})).seq
    await fleet.consume(len(sent))
    recorded = {case: (await fleet.message(seq))["traceparent"] for case, seq in seqs.items()}
    assert recorded == {"valid": valid, "zero trace id": None, "zero parent id": None,
                        "version ff": None, "malformed": None}
    assert {(await fleet.message(seq))["status"] for seq in seqs.values()} == {"completed"}
