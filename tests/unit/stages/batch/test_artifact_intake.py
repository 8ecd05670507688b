"""artifact_validate and artifact_classify."""

from __future__ import annotations

import hashlib

import pytest

from stages.batch import artifact_classify, artifact_validate
from stages.batch.contract import ArtifactBlob, SessionStageError, StageInput
from stages.batch.formats import compression
from tests.shared_data import SharedFile, contents
from tests.unit.stages.batch.formats.nmea_data import lazy, log
from tests.unit.stages.batch.sample_streams import blob

CSV = b"ts,lat_deg,lon_deg\n2024-05-01T10:00:00Z,1,2\n"


def _fails(code: str, *blobs: ArtifactBlob, config: dict[str, object] | None = None) -> None:
    with pytest.raises(SessionStageError) as err:
        artifact_validate.run(StageInput(artifacts=blobs, config=config or {}))
    assert err.value.code == code
    assert err.value.retriable is False


def test_valid_nmea_log() -> None:
    data = log("navika-100-fix.log")
    out = artifact_validate.run(StageInput(artifacts=(blob("navika.nmea", data),)))
    (entry,) = out.summary["artifacts"]
    assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert entry["bytes"] == len(data)
    assert entry["sniffed_format"] == "nmea"
    assert entry["compressed"] is False
    assert entry["extension_matches"] is True
    assert out.summary["bytes_total"] == len(data)


def test_content_decides_not_the_name() -> None:
    out = artifact_validate.run(
        StageInput(artifacts=(blob("ride.gpx.gz", compression.compress(CSV)),))
    )
    (entry,) = out.summary["artifacts"]
    assert (entry["sniffed_format"], entry["compressed"]) == ("csv", True)
    assert entry["extension"] == "gpx"
    assert entry["extension_matches"] is False
    assert entry["decompressed_bytes"] == len(CSV)


def test_no_artifact() -> None:
    _fails("NO_ARTIFACT")


def test_empty_file() -> None:
    _fails("EMPTY_ARTIFACT", blob("x.csv", b""))


def test_blank_content_is_empty() -> None:
    _fails("EMPTY_ARTIFACT", blob("x.csv.gz", compression.compress(b"\n\n  \n")))


def test_checksum_mismatch() -> None:
    _fails("CHECKSUM_MISMATCH", ArtifactBlob(name="x.csv", data=CSV, sha256="0" * 64))


def test_size_limit_from_config() -> None:
    _fails("TOO_LARGE", blob("x.csv", CSV), config={"max_artifact_bytes": 10})


def test_decompressed_size_limit() -> None:
    bomb = compression.compress(CSV + b"\n" * 2_000_000)
    _fails("TOO_LARGE", blob("x.csv.gz", bomb), config={"max_decompressed_bytes": 100_000})


def test_corrupt_gzip() -> None:
    _fails("CORRUPT_ARTIFACT", blob("x.csv.gz", compression.compress(CSV)[:-10]))


@pytest.mark.parametrize(
    "data", [b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", b"hello world\n", b"<kml/>", b"a,b\n1,2\n"]
)
def test_unsupported_content(data: bytes) -> None:
    _fails("UNSUPPORTED_FORMAT", blob("x.csv", data))


@pytest.mark.parametrize("bad", [0, -5, "10", True])
def test_invalid_limit_config(bad: object) -> None:
    _fails("INVALID_CONFIG", blob("x.csv", CSV), config={"max_artifact_bytes": bad})


GPX = (
    b'<?xml version="1.0"?><gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1" '
    b'xmlns:t="http://www.garmin.com/xmlschemas/TrackPointExtension/v1"><trk><trkseg>'
    b'<trkpt lat="1" lon="2"><time>2024-05-01T10:00:00Z</time><extensions>'
    b"<t:TrackPointExtension><t:hr>100</t:hr></t:TrackPointExtension></extensions></trkpt>"
    b"</trkseg></trk></gpx>"
)
RACELOG = (
    b"time_ms,latitude,longitude,speed_kmh,acc_x_g,acc_y_g,acc_z_g,"
    b"gyro_x_dps,gyro_y_dps,gyro_z_dps\n1714557600000,1,2,3,0,0,-1,0,0,0\n"
)
JSONL = (
    b'{"ts":"2024-05-01T10:00:00Z","topic":"imu","values":{"ax_mps2":1}}\n'
    b'{"ts":"2024-05-01T10:00:00Z","topic":"hr","values":{"bpm":1}}\n'
)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    ("data", "fmt", "variant", "expected", "frame"),
    [
        (lazy("sirfstarv-nmea.log"), "nmea", "0183", ["gnss"], None),
        (GPX, "gpx", "1.1", ["gnss", "aux"], None),
        (CSV, "csv", "canonical", ["gnss"], None),
        (RACELOG, "csv", "racelog", ["gnss", "imu"], "FRD"),
        (JSONL, "jsonl", None, ["imu", "aux"], None),
    ],
)
def test_classify(
    data: bytes | SharedFile,
    fmt: str,
    variant: str | None,
    expected: list[str],
    frame: str | None,
    gz: bool,
) -> None:
    raw = compression.compress(contents(data)) if gz else contents(data)
    out = artifact_classify.run(StageInput(artifacts=(blob("upload.bin", raw),)))
    s = out.summary
    assert (s["format"], s["compressed"], s["variant"]) == (fmt, gz, variant)
    assert s["streams_expected"] == expected
    assert s["imu_frame"] == frame
    assert s["artifacts"][0]["format"] == fmt
    assert isinstance(s["hints"], dict)


def test_classify_unsupported() -> None:
    with pytest.raises(SessionStageError) as err:
        artifact_classify.run(StageInput(artifacts=(blob("x.nmea", b"not a log at all\n"),)))
    assert err.value.code == "UNSUPPORTED_FORMAT"
