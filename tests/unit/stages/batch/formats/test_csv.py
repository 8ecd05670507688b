"""CSV reader and writer: canonical columns and the ``racelog`` vendor layout."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from stages.batch.contract import SessionStageError
from stages.batch.formats import csv
from tests.unit.stages.batch import sample_streams as streams

CANONICAL = b"""\
ts,lat_deg,lon_deg,speed_mps,ax_mps2,ay_mps2,az_mps2,gx_rps,gy_rps,gz_rps,\
aux.heart_rate
2024-05-01T10:00:00.000Z,47.1,8.5,3.5,0.1,0.2,9.8,0.01,0.02,0.03,120
2024-05-01T10:00:00.010Z,,,,0.2,0.3,9.7,0.01,0.02,0.03,
2024-05-01T10:00:00.020Z,,,,0.3,,9.6,0.01,0.02,0.03,
,47.2,8.6,,0.1,0.2,9.8,0.01,0.02,0.03,
2024-05-01T10:00:00.100Z,47.2,8.6,,,,,,,,121
"""

RACELOG = b"""\
time_ms,latitude,longitude,altitude_m,speed_kmh,heading_deg,sats,hdop,fix_type,\
acc_x_g,acc_y_g,acc_z_g,gyro_x_dps,gyro_y_dps,gyro_z_dps,temp_f
1714557600000,47.1,8.5,400.0,36.0,90.0,12,0.8,3,0.1,0.2,-1.0,1.0,2.0,3.0,68.0
1714557600040,,,,,,,,,0.2,0.1,-1.0,1.0,2.0,3.0,
1714557600100,47.2,8.6,401.0,72.0,91.0,12,0.8,0,0.3,0.0,-1.0,0.0,0.0,0.0,
"""


def test_canonical_blank_cells_mean_no_sample() -> None:
    parsed = csv.read(CANONICAL)
    gnss = parsed.streams["gnss"].to_pylist()
    assert [(r["lat_deg"], r["speed_mps"]) for r in gnss] == [(47.1, 3.5), (47.2, None)]
    imu = parsed.streams["imu"]
    assert imu.num_rows == 2  # the row missing ay is partial, the untimed row is dropped
    assert imu.column("az_mps2").to_pylist() == [9.8, 9.7]
    assert parsed.stats["partial_imu_rows"] == 1
    assert parsed.stats["rows_without_time"] == 1
    aux = parsed.streams["aux"].to_pylist()
    assert [(r["channel"], r["value"]) for r in aux] == [("heart_rate", 120), ("heart_rate", 121)]
    assert aux[1]["ts"] == dt.datetime(2024, 5, 1, 10, 0, 0, 100000, tzinfo=dt.UTC)
    assert parsed.units == {}
    assert parsed.imu_frame == "FLU"


def test_racelog_keeps_source_units_and_frame() -> None:
    parsed = csv.read(RACELOG)
    assert parsed.stats["layout"] == "racelog"
    gnss = parsed.streams["gnss"].to_pylist()
    assert len(gnss) == 1  # fix_type 0 on the last row: no GNSS sample
    assert gnss[0]["speed_mps"] == 36.0  # km/h until normalise_units
    assert (gnss[0]["sats"], gnss[0]["fix_quality"], gnss[0]["alt_m"]) == (12, 1, 400.0)
    assert parsed.units["gnss"] == {"speed_mps": "km/h"}
    assert parsed.units["imu"]["ax_mps2"] == "g"
    assert parsed.units["imu"]["gz_rps"] == "deg/s"
    assert parsed.units["aux"] == {"temperature": "degF"}
    assert parsed.imu_frame == "FRD"
    assert parsed.streams["imu"].num_rows == 3
    ts = parsed.streams["imu"].column("ts").to_pylist()
    assert ts[1] == dt.datetime(2024, 5, 1, 10, 0, 0, 40000, tzinfo=dt.UTC)


def test_header_is_case_and_space_insensitive() -> None:
    data = b"\xef\xbb\xbf TS , Lat_Deg ,lon_deg\n2024-05-01T10:00:00Z,1.5,2.5\n"
    assert csv.read(data).streams["gnss"].column("lat_deg").to_pylist() == [1.5]


def test_unknown_header_is_unsupported() -> None:
    with pytest.raises(SessionStageError) as err:
        csv.read(b"a,b,c\n1,2,3\n")
    assert err.value.code == "UNSUPPORTED_FORMAT"


def test_non_numeric_cell_is_corrupt() -> None:
    with pytest.raises(SessionStageError) as err:
        csv.read(b"ts,lat_deg,lon_deg\n2024-05-01T10:00:00Z,north,2.5\n")
    assert err.value.code == "CORRUPT_ARTIFACT"


GOOD_ROWS = b"ts,lat_deg,lon_deg\n" + b"2024-05-01T10:00:00Z,47.1,8.5\n" * 3


@pytest.mark.parametrize(("bad_row", "message"), [
    (b"2024-05-01T10:00:01Z,51.123456789,-0.987654321x\n",
     "CSV cannot be parsed: line 5, column 'lon_deg': not a number"),
    (b"51.123456789,51.123456789,-0.987654321\n",
     "CSV cannot be parsed: line 5, column 'ts': not an RFC 3339 time with a UTC offset"),
    (b"2024-05-01T10:00:01Z,51.123456789,-0.987654321,9\n",
     "CSV cannot be parsed: line 5: expected 3 columns, found 4"),
    (b'2024-05-01T10:00:01Z,"51.123456789\n', "CSV cannot be parsed: line 5: expected 3 "
     "columns, found 2"),
])
def test_a_refused_row_is_named_by_line_and_column_never_quoted(
    bad_row: bytes, message: str
) -> None:
    """Arrow quotes the cell or the whole row; the message says where and what kind instead
    (any cell may be a coordinate, spec 000 §15)."""
    with pytest.raises(SessionStageError) as err:
        csv.read(GOOD_ROWS + bad_row + b"2024-05-01T10:00:02Z,47.1,8.5\n")
    assert (err.value.code, err.value.message) == ("CORRUPT_ARTIFACT", message)


def test_a_time_out_of_range_is_named_by_line() -> None:
    with pytest.raises(SessionStageError) as err:
        csv.read(b"time_ms,latitude,longitude\n1714557600000,47.1,8.5\n"
                 b"51123456789e30,51.123456789,-0.987654321\n")
    assert err.value.message == (
        "CSV cannot be parsed: line 3, column 'time_ms': a time out of range")


@pytest.mark.parametrize("layout", ["canonical", "racelog"])
def test_writer_round_trip_merges_rows(layout: str) -> None:
    gnss, imu = streams.gnss(5, hz=10.0), streams.imu(50, hz=100.0)
    data = csv.write({"gnss": gnss, "imu": imu}, layout=layout)
    assert data.count(b"\n") == 1 + 50  # GNSS times coincide with IMU rows: one row each
    parsed = csv.read(data)
    assert parsed.streams["gnss"].num_rows == 5
    assert parsed.streams["imu"].num_rows == 50
    assert parsed.streams["imu"].column("ts").equals(imu.column("ts"))
    lat = parsed.streams["gnss"].column("lat_deg").to_numpy()
    assert np.allclose(lat, gnss.column("lat_deg").to_numpy(), rtol=0, atol=1e-12)
