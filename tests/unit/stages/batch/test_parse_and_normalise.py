"""parse_raw and normalise_units."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import canonical, normalise_units, parse_raw
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.batch.formats import compression
from tests.unit.stages.batch.formats.nmea_data import LOGS, log
from tests.unit.stages.batch.formats.test_csv import RACELOG
from tests.unit.stages.batch.sample_streams import blob


def _parse(name: str, data: bytes) -> StageOutput:
    return parse_raw.run(StageInput(artifacts=(blob(name, data),)))


def _normalise(parsed: StageOutput) -> StageOutput:
    return normalise_units.run(
        StageInput(datasets=parsed.datasets, summaries={"parse_raw": parsed.summary})
    )


@pytest.mark.parametrize("name", LOGS)
def test_every_real_log_parses(name: str) -> None:
    out = _parse("log.nmea", log(name))
    assert set(out.datasets) == {"gnss", "imu", "aux"}
    assert out.summary["format"] == "nmea"
    assert out.summary["capabilities"]["imu"] is False
    assert out.summary["units"] == (
        {"gnss": {"speed_mps": "kn"}} if out.summary["gnss_fix"] else {}
    )


def test_demo_mode_log_is_classified_as_no_fix() -> None:
    out = _parse("geko.log", log("garmin-geko201.log"))
    assert out.summary["gnss_fix"] is False
    assert out.summary["gnss_fix_reason"] == "SIMULATOR_ONLY"
    assert out.summary["rows"]["gnss"] == 0


def test_log_without_any_fix_is_no_fix() -> None:
    lines = [line for line in log("bt451.log").split(b"\n") if b",,,,," in line or b"#" in line]
    out = _parse("indoors.log", b"\n".join(lines))
    assert out.summary["gnss_fix"] is False
    assert out.summary["gnss_fix_reason"] == "NO_FIX"


def test_gzip_and_classify_summary_are_used() -> None:
    data = compression.compress(log("navika-100-fix.log"))
    classified = {"artifacts": [{"name": "a", "format": "nmea"}]}
    out = parse_raw.run(
        StageInput(artifacts=(blob("a", data),), summaries={"artifact_classify": classified})
    )
    assert out.summary["rows"]["gnss"] == 20


IMU_ONLY = (
    b"time_ms,acc_x_g,acc_y_g,acc_z_g,gyro_x_dps,gyro_y_dps,gyro_z_dps,temp_f\n"
    b"1461277971000,0,0,-1,0,0,0,50\n1461277971010,0,0,-1,0,0,0,\n1461277971020,0,0,-1,0,0,0,\n"
)


def test_two_artifacts_are_concatenated() -> None:
    out = parse_raw.run(
        StageInput(
            artifacts=(
                blob("a.log", log("navika-100-fix.log")),
                blob("b.csv", IMU_ONLY),
            )
        )
    )
    assert out.summary["formats"] == ["nmea", "csv"]
    assert out.summary["rows"] == {"gnss": 20, "imu": 3, "aux": 1}
    assert out.summary["imu_frame"] == "FRD"
    assert out.summary["units"]["gnss"] == {"speed_mps": "kn"}
    assert out.summary["aux_channels"] == ["temperature"]


def test_two_artifacts_with_conflicting_units_fail() -> None:
    csv_gnss = b"time_ms,latitude,longitude,speed_kmh\n1714557600000,1,2,3\n"
    with pytest.raises(SessionStageError) as err:
        parse_raw.run(
            StageInput(artifacts=(blob("a.log", log("navika-100-fix.log")), blob("b", csv_gnss)))
        )
    assert err.value.code == "UNSUPPORTED_FORMAT"


def test_knots_become_metres_per_second() -> None:
    out = _normalise(_parse("ublox.log", log("ublox-zed-f9p-nmea.log")))
    first = out.datasets["gnss"].to_pylist()[0]
    assert first["speed_mps"] == pytest.approx(0.025 * 1852 / 3600)
    assert first["lat_deg"] == pytest.approx(-(45 + 52.65403 / 60), abs=1e-12)
    assert out.summary["conversions"] == {"gnss.speed_mps": "kn->m/s"}
    assert canonical.field_unit(out.datasets["gnss"], "speed_mps") == "m/s"


def test_racelog_units_and_frame() -> None:
    out = _normalise(_parse("r.csv", RACELOG))
    gnss = out.datasets["gnss"].to_pylist()[0]
    assert gnss["speed_mps"] == pytest.approx(10.0)  # 36 km/h
    imu = out.datasets["imu"].to_pylist()[0]
    g = 9.80665
    assert imu["ax_mps2"] == pytest.approx(0.1 * g)
    assert imu["ay_mps2"] == pytest.approx(-0.2 * g)  # y right -> y left
    assert imu["az_mps2"] == pytest.approx(g)  # z down reading -1 g -> z up reading +g
    assert imu["gx_rps"] == pytest.approx(math.radians(1.0))
    assert imu["gy_rps"] == pytest.approx(-math.radians(2.0))
    assert imu["gz_rps"] == pytest.approx(-math.radians(3.0))
    aux = out.datasets["aux"].to_pylist()[0]
    assert (aux["channel"], aux["value"]) == ("temperature", pytest.approx(20.0))  # 68 F
    assert out.summary["imu_frame_in"] == "FRD"
    assert out.summary["conversions"]["aux.temperature"] == "degF->degC"


def test_units_fall_back_to_field_metadata() -> None:
    parsed = _parse("u.log", log("ublox-zed-f9p-nmea.log"))
    gnss = parsed.datasets["gnss"]
    idx = gnss.schema.get_field_index("speed_mps")
    tagged = gnss.set_column(
        idx, gnss.schema.field(idx).with_metadata({"unit": "kn"}), gnss.column(idx)
    )
    out = normalise_units.run(StageInput(datasets={"gnss": tagged}))
    assert out.datasets["gnss"].column("speed_mps")[0].as_py() == pytest.approx(0.025 * 0.514444)


def test_impossible_values_are_cleaned() -> None:
    ts = pa.array(np.arange(5) * 1_000_000, canonical.TS_TYPE)
    gnss = pa.table(
        {
            "ts": ts,
            "lat_deg": [1.0, 0.0, 95.0, float("nan"), 2.0],
            "lon_deg": [1.0, 0.0, 1.0, 1.0, 2.0],
            "speed_mps": [-1.0, 1.0, 1.0, 1.0, 5.0],
            "course_deg": [370.0, None, None, None, -10.0],
        }
    )
    imu = pa.table(
        {
            "ts": ts,
            **{c: [0.0, float("inf"), 0.0, 0.0, 0.0] for c in canonical.CANONICAL_UNITS["imu"]},
        }
    )
    out = normalise_units.run(StageInput(datasets={"gnss": gnss, "imu": imu}))
    rows = out.datasets["gnss"].to_pylist()
    assert [r["lat_deg"] for r in rows] == [1.0, 2.0]
    assert rows[0]["speed_mps"] is None
    assert [r["course_deg"] for r in rows] == [pytest.approx(10.0), pytest.approx(350.0)]
    assert out.summary["dropped"]["gnss_null_island"] == 1
    assert out.summary["dropped"]["gnss_out_of_range"] == 2
    assert out.summary["nulled"]["gnss_speed_negative"] == 1
    assert out.datasets["imu"].num_rows == 4
    assert out.summary["dropped"]["imu_non_finite"] == 1


def test_unknown_unit_is_refused() -> None:
    parsed = _parse("u.log", log("ublox-zed-f9p-nmea.log"))
    with pytest.raises(SessionStageError) as err:
        normalise_units.run(
            StageInput(
                datasets=parsed.datasets,
                summaries={"parse_raw": {"units": {"gnss": {"speed_mps": "furlong/fortnight"}}}},
            )
        )
    assert err.value.code == "UNSUPPORTED_FORMAT"


@pytest.mark.parametrize(
    ("name", "quality"),
    [
        ("navika-100-fix.log", "good"),  # HDOP 1.2
        ("haicom-305N.log", "degraded"),  # median HDOP 2.3 (1.1 to 21.1)
        ("foretrex-201.log", "insufficient"),  # only 7 fixes
        ("garmin-geko201.log", "insufficient"),  # none at all
    ],
)
def test_gnss_quality_capability(name: str, quality: str) -> None:
    caps = _parse(name, log(name)).summary["capabilities"]
    assert caps["gnss_quality"] == quality
    assert caps["gnss"] is (name != "garmin-geko201.log")
