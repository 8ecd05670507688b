"""The NMEA reader against the real receiver logs in ``shared/data/nmea``.

Expected values were read off the files by hand (and the fix counts cross-checked with
``grep``/``awk``: distinct times of RMC lines with status A or GGA lines with quality 1-6).
"""

from __future__ import annotations

import datetime as dt

import pytest

from stages.batch.formats import nmea
from tests.shared_data import data_file
from tests.unit.stages.batch.formats.nmea_data import LOGS, log

FIX_EPOCHS = {
    "bt451.log": 14,
    "foretrex-201.log": 7,
    "garmin-geko201.log": 0,
    "haicom-305N.log": 68,
    "navika-100-fix.log": 20,
    "neo-m8n.log": 23,
    "sirfstarv-nmea.log": 59,
    "telit-he910.log": 187,
    "ublox-zed-f9p-nmea.log": 29,
}


def _utc(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int = 0) -> dt.datetime:
    return dt.datetime(y, mo, d, h, mi, s, us, tzinfo=dt.UTC)


def _row(name: str, index: int) -> dict[str, object]:
    table = nmea.read(log(name)).streams["gnss"]
    rows: list[dict[str, object]] = table.to_pylist()
    return rows[index]


def test_every_log_is_present() -> None:
    folder = data_file("nmea")
    assert sorted(p.name for p in folder.glob("*.log")) == sorted(FIX_EPOCHS) == list(LOGS)


@pytest.mark.parametrize(("name", "fixes"), sorted(FIX_EPOCHS.items()))
def test_each_valid_epoch_becomes_one_sample(name: str, fixes: int) -> None:
    parsed = nmea.read(log(name))
    gnss = parsed.streams["gnss"]
    assert gnss.num_rows == fixes
    assert parsed.stats["fix_epochs"] == fixes
    assert parsed.stats["bad_checksum"] == 0
    assert parsed.units == {"gnss": {"speed_mps": "kn"}}
    if fixes:
        assert gnss.column("lat_deg").null_count == 0
        assert gnss.column("lon_deg").null_count == 0


def test_ublox_first_and_last_fix() -> None:
    first = _row("ublox-zed-f9p-nmea.log", 0)
    # $GNRMC,003956.00,A,4552.65403,S,17030.00668,E,0.025,,120419 + GNGGA 1,12,0.64,14.2,M
    assert first["ts"] == _utc(2019, 4, 12, 0, 39, 56)
    assert first["lat_deg"] == pytest.approx(-(45 + 52.65403 / 60), abs=1e-12)
    assert first["lon_deg"] == pytest.approx(170 + 30.00668 / 60, abs=1e-12)
    assert first["alt_m"] == pytest.approx(14.2)
    assert first["sats"] == 12
    assert first["hdop"] == pytest.approx(0.64)
    assert first["speed_mps"] == pytest.approx(0.025)  # still knots at this stage
    assert first["course_deg"] is None  # empty in RMC and VTG
    last = _row("ublox-zed-f9p-nmea.log", -1)
    assert last["ts"] == _utc(2019, 4, 12, 0, 40, 24)
    assert last["lat_deg"] == pytest.approx(-(45 + 52.65393 / 60), abs=1e-12)
    assert last["alt_m"] == pytest.approx(14.8)


def test_haicom_skips_the_no_fix_start_then_moves() -> None:
    parsed = nmea.read(log("haicom-305N.log"))
    assert parsed.stats["epochs"] == 74  # 6 leading epochs report status V / quality 0
    first = parsed.streams["gnss"].slice(0, 1).to_pylist()[0]
    assert first["ts"] == _utc(2007, 4, 8, 9, 53, 4, 802000)
    assert first["lat_deg"] == pytest.approx(-(27 + 12.6520 / 60), abs=1e-12)
    assert first["lon_deg"] == pytest.approx(153 + 3.1397 / 60, abs=1e-12)
    moving = _row("haicom-305N.log", 5)
    # $GPRMC,095309.801,A,2712.6444,S,15303.1229,E,5.19,299.36,080407
    assert moving["ts"] == _utc(2007, 4, 8, 9, 53, 9, 801000)
    assert moving["lat_deg"] == pytest.approx(-(27 + 12.6444 / 60), abs=1e-12)
    assert moving["lon_deg"] == pytest.approx(153 + 3.1229 / 60, abs=1e-12)
    assert moving["speed_mps"] == pytest.approx(5.19)
    assert moving["course_deg"] == pytest.approx(299.36)
    assert moving["sats"] == 5


def test_sirfstar_gp_and_gl_sentences_of_one_epoch_merge() -> None:
    parsed = nmea.read(log("sirfstarv-nmea.log"))
    assert parsed.stats["sentences"]["GGA"] == 118  # GPGGA + GLGGA, 59 epochs
    assert parsed.stats["talkers"]["GL"] > 0
    first = parsed.streams["gnss"].slice(0, 1).to_pylist()[0]
    assert first["ts"] == _utc(2019, 2, 5, 2, 9, 35)
    assert first["lat_deg"] == pytest.approx(44 + 4.1351 / 60, abs=1e-12)
    assert first["lon_deg"] == pytest.approx(-(121 + 18.8556 / 60), abs=1e-12)
    assert first["sats"] == 8  # from the first (GP) GGA of the epoch
    assert first["alt_m"] == pytest.approx(1123.9)


def test_foretrex_dgps_fix_and_cut_off_line() -> None:
    parsed = nmea.read(log("foretrex-201.log"))
    assert parsed.stats["truncated"] == 1  # "4.4343,N,01025.5386,E,200002,A,D*48"
    assert parsed.stats["proprietary"] == 24  # $PGRME / $PGRMZ
    first = parsed.streams["gnss"].slice(0, 1).to_pylist()[0]
    assert first["ts"] == _utc(2010, 8, 26, 20, 0, 4)
    assert first["lat_deg"] == pytest.approx(55 + 4.4343 / 60, abs=1e-12)
    assert first["lon_deg"] == pytest.approx(10 + 25.5386 / 60, abs=1e-12)
    assert first["fix_quality"] == 2
    assert first["alt_m"] == pytest.approx(-9.1)


def test_telit_long_no_fix_stretch_then_fixes_in_file_order() -> None:
    parsed = nmea.read(log("telit-he910.log"))
    assert parsed.stats["sentences"]["RMC"] == 224
    ts = parsed.streams["gnss"].column("ts").to_pylist()
    # 105153.71 is followed by 105153.408: the receiver stepped back; the reader keeps both
    # (in file order) and time_align removes the step back.
    assert ts[0] == _utc(2019, 3, 12, 10, 51, 53, 710000)
    assert ts[1] == _utc(2019, 3, 12, 10, 51, 53, 408000)
    last = parsed.streams["gnss"].slice(186, 1).to_pylist()[0]
    assert last["ts"] == _utc(2019, 3, 12, 10, 54, 59, 408000)
    assert last["lat_deg"] == pytest.approx(50 + 50.4126 / 60, abs=1e-12)
    assert last["lon_deg"] == pytest.approx(4 + 20.8228 / 60, abs=1e-12)


def test_garmin_demo_mode_has_no_fix() -> None:
    parsed = nmea.read(log("garmin-geko201.log"))
    assert parsed.streams["gnss"].num_rows == 0
    assert parsed.stats["epochs"] == 18
    assert parsed.stats["simulated_epochs"] == 18  # RMC mode S, GGA quality 8


def test_bt451_no_fix_stretch_yields_nothing_and_later_fixes_are_real() -> None:
    parsed = nmea.read(log("bt451.log"))
    # The log opens with four cycles of empty RMC/GGA (status V, quality 0): no samples.
    # Contrary to its README line, it then holds two short fixed stretches; they are valid
    # RMC/GGA with good checksums, so they are samples.
    first = parsed.streams["gnss"].slice(0, 1).to_pylist()[0]
    assert first["ts"] == _utc(2009, 12, 9, 15, 25, 5)
    assert first["lat_deg"] == pytest.approx(55 + 47.82113 / 60, abs=1e-12)
    assert first["lon_deg"] == pytest.approx(23 + 34.14130 / 60, abs=1e-12)
    assert parsed.stats["sentences"]["RMC"] == 17


def test_neo_m8n_gll_closing_a_previous_cycle_adds_no_sample() -> None:
    parsed = nmea.read(log("neo-m8n.log"))
    # The file starts with a GLL for 171925.00 whose RMC/GGA were not recorded.
    assert parsed.streams["gnss"].column("ts").to_pylist()[0] == _utc(2015, 3, 18, 17, 19, 26)
    assert parsed.stats["talkers"]["GN"] > 0
