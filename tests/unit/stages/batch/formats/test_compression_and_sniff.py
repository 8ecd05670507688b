"""Gzip handling and content sniffing."""

from __future__ import annotations

import gzip
import random

import pytest

from stages.batch.contract import SessionStageError
from stages.batch.formats import compression
from stages.batch.formats.sniff import sniff
from tests.shared_data import SharedFile, contents
from tests.unit.stages.batch.formats.nmea_data import lazy, log


def test_gzip_round_trip_and_deterministic_output() -> None:
    data = b"hello\n" * 1000
    packed = compression.compress(data)
    assert packed == compression.compress(data)  # no timestamp in the header
    assert compression.unwrap(packed, max_bytes=10_000) == (data, True)
    assert compression.unwrap(data, max_bytes=10_000) == (data, False)


def test_concatenated_members() -> None:
    packed = gzip.compress(b"one\n") + gzip.compress(b"two\n")
    assert compression.decompress(packed, max_bytes=100) == b"one\ntwo\n"


def test_truncated_gzip_is_corrupt() -> None:
    packed = compression.compress(b"x" * 5000)
    with pytest.raises(SessionStageError) as err:
        compression.decompress(packed[:-12], max_bytes=10_000)
    assert err.value.code == "CORRUPT_ARTIFACT"


def test_garbage_after_magic_is_corrupt() -> None:
    with pytest.raises(SessionStageError) as err:
        compression.decompress(b"\x1f\x8bnot really gzip", max_bytes=10_000)
    assert err.value.code == "CORRUPT_ARTIFACT"


def test_inflation_past_the_limit_stops() -> None:
    bomb = compression.compress(b"\0" * 5_000_000)
    assert len(bomb) < 10_000
    with pytest.raises(SessionStageError) as err:
        compression.decompress(bomb, max_bytes=1_000_000)
    assert err.value.code == "TOO_LARGE"


@pytest.mark.parametrize(
    ("data", "fmt", "variant"),
    [
        (lazy("neo-m8n.log"), "nmea", "0183"),
        (lazy("bt451.log"), "nmea", "0183"),
        (b'<?xml version="1.0"?>\n<gpx version="1.1" xmlns="x"><trk/></gpx>', "gpx", "1.1"),
        (b"ts,lat_deg,lon_deg\n2024-05-01T10:00:00Z,1,2\n", "csv", "canonical"),
        (b"time_ms,latitude,longitude,acc_x_g\n1,2,3,4\n", "csv", "racelog"),
        (b'{"ts": 1, "topic": "imu", "values": {}}\n{"ts": 2, "top', "jsonl", None),
    ],
)
def test_formats_are_recognised_by_content(
    data: bytes | SharedFile, fmt: str, variant: str | None
) -> None:
    found = sniff(contents(data))
    assert found is not None
    assert (found.format, found.variant) == (fmt, variant)


def test_nmea_hints() -> None:
    found = sniff(log("ublox-zed-f9p-nmea.log"))
    assert found is not None
    assert {"GN", "GP", "GL", "GA", "GB"} <= set(found.hints["talkers"])
    assert {"RMC", "GGA", "VTG", "GLL"} <= set(found.hints["sentences"])
    assert found.streams == ("gnss",)


def test_csv_hints_name_streams_and_frame() -> None:
    found = sniff(
        b"time_ms,latitude,longitude,acc_x_g,acc_y_g,acc_z_g,"
        b"gyro_x_dps,gyro_y_dps,gyro_z_dps,temp_f\n"
    )
    assert found is not None
    assert found.streams == ("gnss", "imu", "aux")
    assert found.imu_frame == "FRD"


@pytest.mark.parametrize(
    "data",
    [
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        b"<kml><Document/></kml>",
        b"just some prose\nwith lines\n",
        b"a,b,c\n1,2,3\n",
        b'{"hello": "world"}\n',
        b"[1, 2, 3]\n",
    ],
)
def test_unsupported_content(data: bytes) -> None:
    assert sniff(data) is None


def test_inspect_streams_what_the_checks_need() -> None:
    plain = b"$GPRMC,1\n" * 200_000  # 1.8 MB: several output chunks and input slices
    packed = gzip.compress(plain[:700_000]) + b"\0" * 70_000 + gzip.compress(plain[700_000:])
    seen = compression.inspect(packed, max_bytes=len(plain), head_bytes=100)
    assert (seen.head, seen.size, seen.has_content, seen.compressed) == (
        plain[:100], len(plain), True, True
    )
    assert b"".join(compression.inflate(packed, max_bytes=len(plain))) == plain
    blank = compression.inspect(compression.compress(b" \n\t" * 1000), max_bytes=10**6,
                                head_bytes=10)
    assert (blank.has_content, blank.size) == (False, 3000)
    assert not compression.inspect(b"\r\n  ", max_bytes=10, head_bytes=10).has_content


@pytest.mark.parametrize("cut", [12, 5_000, 50_000])
def test_inspect_refuses_truncated_and_oversized_streams(cut: int) -> None:
    packed = compression.compress(random.Random(27).randbytes(512_000))  # incompressible
    assert len(packed) > 100_000
    with pytest.raises(SessionStageError) as err:
        compression.inspect(packed[:-cut], max_bytes=10**6, head_bytes=10)
    assert err.value.code == "CORRUPT_ARTIFACT"
    with pytest.raises(SessionStageError) as err:
        compression.inspect(packed, max_bytes=511_999, head_bytes=10)
    assert err.value.code == "TOO_LARGE"
