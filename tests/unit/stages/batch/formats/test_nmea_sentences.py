"""The NMEA reader and writer on hand-made sentences (edge cases the real logs lack)."""

from __future__ import annotations

import datetime as dt
from functools import reduce

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import canonical
from stages.batch.formats import nmea
from stages.batch.formats.nmea_writer import checksums
from stages.batch.formats.parsed import ParsedSession


def sentence(body: str) -> str:
    cs = reduce(lambda a, b: a ^ b, body.encode(), 0)
    return f"${body}*{cs:02X}"


def read(*lines: str, session_date: dt.date | None = None) -> ParsedSession:
    return nmea.read(("\r\n".join(lines) + "\r\n").encode(), session_date=session_date)


UPLOAD_DATE = dt.date(1994, 3, 23)  # the date given with the upload, for logs without one


RMC = "GPRMC,120000.00,A,4807.038,N,01131.000,E,10.0,84.4,230394,,,A"
GGA = "GPGGA,120000.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"


def test_rmc_and_gga_of_one_epoch_make_one_sample() -> None:
    parsed = read(sentence(RMC), sentence(GGA))
    rows = parsed.streams["gnss"].to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert row["ts"] == dt.datetime(1994, 3, 23, 12, 0, tzinfo=dt.UTC)
    assert row["lat_deg"] == pytest.approx(48 + 7.038 / 60)
    assert row["lon_deg"] == pytest.approx(11 + 31.0 / 60)
    assert (row["speed_mps"], row["course_deg"]) == (10.0, 84.4)
    assert (row["alt_m"], row["sats"], row["hdop"], row["fix_quality"]) == (545.4, 8, 0.9, 1)


def test_bad_checksum_is_counted_and_skipped() -> None:
    good = sentence(RMC)
    bad = good[:-2] + ("00" if good[-2:] != "00" else "01")
    parsed = read(bad, sentence(GGA.replace("120000.00", "120001.00")), session_date=UPLOAD_DATE)
    assert parsed.stats["bad_checksum"] == 1
    assert parsed.streams["gnss"].column("ts").to_pylist() == [
        dt.datetime(1994, 3, 23, 12, 0, 1, tzinfo=dt.UTC)  # no RMC date survived: the upload's
    ]
    assert parsed.stats["date_source"] == "upload"


def test_comments_blank_and_cut_off_lines() -> None:
    full = sentence(RMC)
    parsed = read("# a comment", "", full[:30], full[20:], "garbage$" + full[1:])
    assert parsed.stats["lines_comment"] == 1
    assert parsed.stats["truncated"] == 3  # cut head, cut tail, text before '$'
    assert parsed.streams["gnss"].num_rows == 1  # the sentence after the junk is good


def test_status_v_and_quality_zero_are_not_fixes() -> None:
    parsed = read(
        sentence(RMC.replace(",A,4807", ",V,4807")),
        sentence(GGA.replace(",E,1,08", ",E,0,08")),
    )
    assert parsed.streams["gnss"].num_rows == 0
    assert parsed.stats["epochs"] == 1


def test_empty_fields_do_not_crash() -> None:
    parsed = read(sentence("GPRMC,,V,,,,,,,,,,N"), sentence("GPGGA,,,,,,0,,,,M,,M,,"))
    assert parsed.streams["gnss"].num_rows == 0
    assert parsed.stats["bad_fields"] == 0


def test_malformed_numbers_count_as_bad_fields() -> None:
    parsed = read(sentence(RMC.replace("4807.038", "48x7.038")))
    assert parsed.stats["bad_fields"] == 1
    assert parsed.streams["gnss"].num_rows == 0


@pytest.mark.parametrize("talker", ["GP", "GN", "GL", "GA", "GB"])
def test_all_talkers(talker: str) -> None:
    parsed = read(sentence(talker + RMC[2:]))
    assert parsed.streams["gnss"].num_rows == 1
    assert parsed.stats["talkers"] == {talker: 1}


def test_vtg_fills_speed_and_course_when_rmc_is_absent() -> None:
    parsed = read(
        sentence(GGA), sentence("GPVTG,77.5,T,,M,,N,18.52,K,A"), session_date=UPLOAD_DATE
    )
    row = parsed.streams["gnss"].to_pylist()[0]
    assert row["speed_mps"] == pytest.approx(10.0)  # 18.52 km/h = 10 kn
    assert row["course_deg"] == pytest.approx(77.5)


def test_gll_only_log_yields_samples() -> None:
    parsed = read(
        sentence("GPGLL,4916.45,N,12311.12,W,225444,A,A"),
        sentence("GPGLL,4916.46,N,12311.12,W,225445,A,A"),
        session_date=UPLOAD_DATE,
    )
    lats = parsed.streams["gnss"].column("lat_deg").to_pylist()
    assert lats == pytest.approx([49 + 16.45 / 60, 49 + 16.46 / 60])
    assert parsed.streams["gnss"].column("lon_deg").to_pylist()[0] == pytest.approx(
        -(123 + 11.12 / 60)
    )


def test_midnight_rollover_advances_the_date() -> None:
    parsed = read(
        sentence(RMC.replace("120000.00", "235959.50")),
        sentence(GGA.replace("120000.00", "000000.50")),
    )
    ts = parsed.streams["gnss"].column("ts").to_pylist()
    assert ts == [
        dt.datetime(1994, 3, 23, 23, 59, 59, 500000, tzinfo=dt.UTC),
        dt.datetime(1994, 3, 24, 0, 0, 0, 500000, tzinfo=dt.UTC),
    ]


def test_zda_dates_a_gga_only_log() -> None:
    parsed = read(sentence("GPZDA,120000.00,05,06,2021,00,00"), sentence(GGA))
    assert parsed.streams["gnss"].column("ts").to_pylist() == [
        dt.datetime(2021, 6, 5, 12, 0, tzinfo=dt.UTC)
    ]


def test_checksums_match_the_definition() -> None:
    bodies = [b"GPGLL,4916.45,N", b"A", b"GNRMC,,V,,,,,,,,,,N"]
    want = [reduce(lambda a, b: a ^ b, body, 0) for body in bodies]
    assert checksums(bodies).tolist() == want


def test_writer_round_trip() -> None:
    n = 25
    ts = 1_714_557_600_000_000 + np.arange(n) * 100_000
    lat = np.linspace(-33.9, -33.8, n)
    lon = np.linspace(151.1, 151.3, n)
    gnss = canonical.conform(
        "gnss",
        pa.table(
            {
                "ts": pa.array(ts, canonical.TS_TYPE),
                "lat_deg": lat,
                "lon_deg": lon,
                "speed_mps": np.linspace(0, 50, n),
                "alt_m": np.full(n, 12.25),
            }
        ),
    )
    data = nmea.write({"gnss": gnss})
    parsed = nmea.read(data)
    back = parsed.streams["gnss"]
    assert parsed.stats["bad_checksum"] == 0
    assert back.column("ts").cast(pa.int64()).to_pylist() == ts.tolist()
    assert np.abs(back.column("lat_deg").to_numpy() - lat).max() < 1e-6 / 60 * 1.01
    assert np.abs(back.column("lon_deg").to_numpy() - lon).max() < 1e-6 / 60 * 1.01
    knots = back.column("speed_mps").to_numpy()
    assert np.abs(knots * 1852 / 3600 - np.linspace(0, 50, n)).max() < 1e-3
    assert back.column("alt_m").to_pylist() == [12.25] * n
