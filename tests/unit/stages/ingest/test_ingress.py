"""Subjects, dedupe keys and headers: what reaches Postgres is always well-formed."""

from __future__ import annotations

import pytest

from stages.ingest.ingress import EnvelopeError, Receipt, decode_envelope, dedupe_key, parse_subject


def _receipt(headers: dict[str, str] | None = None, *, seq: int = 7) -> Receipt:
    return Receipt.of(
        subject="telemetry.acme.d1.state",
        data=b"{}",
        headers=headers,
        stream_seq=seq,
        received_at_ns=1_700_000_000_000_000_123,
    )


def test_subjects_are_split_with_and_without_namespace() -> None:
    parts = parse_subject("telemetry.acme.dev-1.state")
    assert parts is not None and (parts.tenant, parts.device, parts.topic) == (
        "acme",
        "dev-1",
        "state",
    )
    assert parse_subject("t1.telemetry.acme.d.gps", "t1") is not None
    assert parse_subject("telemetry.acme.d.gps", "t1") is None
    assert parse_subject("t2.telemetry.acme.d.gps", "t1") is None


@pytest.mark.parametrize(
    "subject",
    [
        "telemetry.acme.d1",
        "telemetry.acme.d1.state.extra",
        "metrics.acme.d1.state",
        "telemetry.ACME.d1.state",
        "telemetry.acme.d\x001.state",
        "telemetry.acme.d 1.state",
        "telemetry..d1.state",
        "telemetry.acme." + "d" * 129 + ".state",
    ],
)
def test_subjects_the_registry_could_not_hold_are_refused(subject: str) -> None:
    assert parse_subject(subject) is None


def test_dedupe_key_is_stable_per_message_id_and_per_receipt_without_one() -> None:
    assert dedupe_key("acme", _receipt({"Nats-Msg-Id": "abc"})) == "m:acme:abc"
    assert dedupe_key("acme", _receipt({"Nats-Msg-Id": "abc"}, seq=99)) == "m:acme:abc"
    assert dedupe_key("acme", _receipt()) == "r:acme:1700000000000000123:7"
    assert dedupe_key("acme", _receipt(seq=8)) != dedupe_key("acme", _receipt())
    assert dedupe_key("acme", _receipt({"other": "x"})) == "r:acme:1700000000000000123:7"


@pytest.mark.parametrize("msg_id", ["x" * 201, "a\x00b", "naïve", "with space"])
def test_odd_message_ids_are_hashed_but_stay_stable(msg_id: str) -> None:
    key = dedupe_key("acme", _receipt({"Nats-Msg-Id": msg_id}))
    assert key.startswith("m:acme:sha256:") and len(key) == len("m:acme:sha256:") + 64
    assert key == dedupe_key("acme", _receipt({"Nats-Msg-Id": msg_id}, seq=1))


def test_only_well_formed_traceparents_are_kept() -> None:
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert _receipt({"traceparent": good}).traceparent == good
    assert _receipt({"traceparent": "x\x00y"}).traceparent is None
    assert _receipt().traceparent is None and _receipt().msg_id is None


def test_received_at_keeps_microseconds() -> None:
    assert _receipt().received_at.isoformat() == "2023-11-14T22:13:20+00:00"
    r = Receipt.of(subject="s", data=b"", headers=None, stream_seq=1, received_at_ns=1_999)
    assert r.received_at.microsecond == 1


def test_nul_in_values_is_refused_but_an_escaped_backslash_is_fine() -> None:
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(b'{"ts": 1, "values": {"fw": "a\\u0000b"}}')
    assert info.value.code == "ENVELOPE_INVALID"
    with pytest.raises(EnvelopeError):
        decode_envelope(b'{"ts": 1, "values": {"a\\u0000": 1}}')
    ok = decode_envelope(b'{"ts": 1, "values": {"fw": "a\\\\u0000b"}}')
    assert ok.values["fw"] == "a\\u0000b"


@pytest.mark.parametrize("value", [
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # uppercase hex
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
    "",
])
def test_invalid_traceparents_are_ignored_as_w3c_requires(value: str) -> None:
    assert _receipt({"traceparent": value}).traceparent is None


@pytest.mark.parametrize("value", [
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
    "01-00000000000000000000000000000001-0000000000000001-ff",  # a later version, ids not zero
    "fe-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
])
def test_valid_traceparents_are_kept_as_sent(value: str) -> None:
    assert _receipt({"traceparent": value}).traceparent == value
