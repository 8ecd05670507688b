"""JSON Lines of Tideway envelopes: reader (fast and line-by-line paths) and writer."""

from __future__ import annotations

import datetime as dt

import pytest

from stages.batch.contract import SessionStageError
from stages.batch.formats import jsonl
from stages.batch.formats.parsed import ParsedSession
from tests.unit.stages.batch import sample_streams as streams

STRING_TS = b"".join(
    line + b"\n"
    for line in (
        b'{"ts":"2024-05-01T10:00:00Z","topic":"gnss","values":{"lat_deg":1.5,"lon_deg":2.5,"sats":9}}',
        b'{"ts":"2024-05-01T10:00:00.010Z","topic":"imu","device_id":"d1","values":{"ax_mps2":0.1,"ay_mps2":0.2,"az_mps2":9.8,"gx_rps":0,"gy_rps":0,"gz_rps":0.5}}',
        b'{"ts":"2024-05-01T10:00:00.020Z","topic":"imu","values":{"ax_mps2":0.1}}',
        b'{"ts":"2024-05-01T10:00:01Z","topic":"aux","values":{"heart_rate":150}}',
        b'{"ts":"2024-05-01T10:00:01Z","topic":"engine","values":{"rpm":9000.5,"gear":3}}',
        b'{"ts":"2024-05-01T10:00:02Z","topic":"gnss","values":{"lon_deg":2.6}}',
    )
)


def _check(parsed: ParsedSession) -> None:
    gnss = parsed.streams["gnss"].to_pylist()
    assert [(r["lat_deg"], r["lon_deg"], r["sats"]) for r in gnss] == [(1.5, 2.5, 9)]
    imu = parsed.streams["imu"].to_pylist()
    assert len(imu) == 1
    assert imu[0]["gz_rps"] == 0.5
    assert imu[0]["ts"] == dt.datetime(2024, 5, 1, 10, 0, 0, 10000, tzinfo=dt.UTC)
    aux = sorted((r["channel"], r["value"]) for r in parsed.streams["aux"].to_pylist())
    assert aux == [("engine.gear", 3.0), ("engine.rpm", 9000.5), ("heart_rate", 150.0)]
    assert parsed.stats["gnss_dropped"] == 1
    assert parsed.stats["imu_dropped"] == 1


def test_string_timestamps() -> None:
    _check(jsonl.read(STRING_TS))


def test_mixed_epoch_ms_and_string_timestamps_take_the_slow_path() -> None:
    mixed = STRING_TS.replace(b'"2024-05-01T10:00:00.010Z"', b"1714557600010")
    _check(jsonl.read(mixed))


def test_epoch_ms_everywhere() -> None:
    data = b'{"ts":1714557600000,"topic":"gnss","values":{"lat_deg":1.0,"lon_deg":2.0}}\n'
    row = jsonl.read(data).streams["gnss"].to_pylist()[0]
    assert row["ts"] == dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)


def test_malformed_line_is_corrupt_and_named() -> None:
    data = STRING_TS + b'{"ts": 1, "values": {}}\n'
    with pytest.raises(SessionStageError) as err:
        jsonl.read(data)
    assert err.value.code == "CORRUPT_ARTIFACT"
    assert err.value.message == "line 7 is not a Tideway envelope: 'topic' is missing"


@pytest.mark.parametrize(("line", "problem"), [
    (b'{"ts": "51.123456789", "topic": "gnss"}',
     "'ts' is not an RFC 3339 time or a number of epoch milliseconds in range"),
    (b'{"ts": 51123456789e10, "topic": "gnss"}',
     "'ts' is not an RFC 3339 time or a number of epoch milliseconds in range"),
    (b'{"ts": 51123456789e300, "topic": "gnss"}',
     "not JSON (number is infinity when parsed as double at column 8)"),
    (b'{"ts": [51.123456789], "topic": "gnss"}',
     "'ts' is neither an RFC 3339 string nor a number of epoch milliseconds"),
    (b'{"ts": 1, "topic": "gnss", "values": {"lat_deg": 51.123456789, -0.987654321}}',
     "not JSON (unexpected character, expected a string key at column 64)"),
    (b"[51.123456789, -0.987654321]", "not a JSON object"),
])
def test_a_bad_line_is_named_by_number_field_and_kind_never_quoted(
    line: bytes, problem: str
) -> None:
    """Neither the line nor a value of it is quoted (any value may be a coordinate)."""
    with pytest.raises(SessionStageError) as err:
        jsonl.read(STRING_TS + line + b"\n")
    assert err.value.message == f"line 7 is not a Tideway envelope: {problem}"


def test_writer_round_trip() -> None:
    src = {
        "gnss": streams.gnss(4),
        "imu": streams.imu(40),
        "aux": streams.aux("heart_rate", [120.0, 121.0]),
    }
    parsed = jsonl.read(jsonl.write(src))
    for name, table in src.items():
        assert parsed.streams[name].equals(table), name
