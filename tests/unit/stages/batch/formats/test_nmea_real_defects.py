"""NMEA defects that real receiver logs exposed (issue 18): each test fails without its fix.

- a receiver that restarts leaves a cut-off line padded with NUL bytes: the outcome must not
  depend on whether it falls inside the sniffer's 64 KiB head;
- AIS transponders interleave ``!AIVDM``/``!AIVDO`` sentences with their fixes;
- ``GNS`` sentences replace GGA on some receivers;
- a log with no date anywhere must never be stamped 1970-01-01.
"""

from __future__ import annotations

import datetime as dt
from functools import reduce

import pytest

from schemas import error_codes as codes
from stages.batch import parse_raw
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.batch.formats import nmea
from stages.batch.formats.sniff import HEAD_BYTES, sniff
from tests.unit.stages.batch.formats.nmea_data import log
from tests.unit.stages.batch.sample_streams import blob


def _cs(body: str) -> str:
    return f"{reduce(lambda a, b: a ^ b, body.encode(), 0):02X}"


def sentence(body: str, start: str = "$") -> str:
    return f"{start}{body}*{_cs(body)}"


def _lines(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n").encode()


def _parse(data: bytes, **config: object) -> StageOutput:
    return parse_raw.run(StageInput(artifacts=(blob("log.nmea", data),), config=config))


RMC = "GPRMC,{t},A,4807.038,N,01131.000,E,10.0,84.4,230394,,,A"
GGA = "GPGGA,{t},4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"


# -- NUL-padded cut-off lines ------------------------------------------------------------------


def _with_nul_line(data: bytes, *, at_line: int) -> bytes:
    lines = data.split(b"\n")
    cut = lines[at_line][:20] + b"\x00" * 300  # what a restarting receiver leaves behind
    return b"\n".join([*lines[:at_line], cut, *lines[at_line:]])


def test_nul_padded_cut_off_line_in_the_head_does_not_make_the_log_binary() -> None:
    data = _with_nul_line(log("neo-m8n.log"), at_line=10)
    assert data.find(b"\x00") < HEAD_BYTES
    found = sniff(data)
    assert found is not None and found.format == "nmea"


def test_the_outcome_does_not_depend_on_where_the_nul_line_falls() -> None:
    # One log (a real one, repeated past 64 KiB) with the NUL line once inside the sniffer's
    # head and once after it: the same fixes and the same truncated count either way.
    real = log("neo-m8n.log")
    big = real * (HEAD_BYTES // len(real) + 2)
    late = big[: HEAD_BYTES + 100].count(b"\n") + 5
    inside = _with_nul_line(big, at_line=10)
    outside = _with_nul_line(big, at_line=late)
    assert inside.find(b"\x00") < HEAD_BYTES < outside.find(b"\x00")
    results = []
    for data in (inside, outside):
        out = _parse(data)
        reader = out.summary["readers"][0]
        results.append((out.summary["format"], out.datasets["gnss"].num_rows, reader["truncated"]))
    assert results[0] == results[1]
    assert results[0][0] == "nmea" and results[0][1] > 0 and results[0][2] >= 1


def test_other_binary_content_with_nuls_is_still_refused() -> None:
    assert sniff(b"\x00\x01\x02binary\x00" * 100) is None


# -- AIS sentences -----------------------------------------------------------------------------

AIS = [
    sentence("AIVDM,1,1,,B,177KQJ5000G?tO`K>RA1wUbN0TKH,0", "!"),
    sentence("AIVDM,1,1,,A,13u?etPv2;0n:dDPwUM1U1Cb069D,0", "!"),
    sentence("AIVDO,1,1,,,B39i>1000nTu;gQAlBj:wwS5kP06,0", "!"),
]


def test_ais_sentences_are_nmea_and_the_fixes_are_read() -> None:
    lines = []
    for i in range(20):
        lines += AIS  # three AIS lines per fix: they outnumber the "$" sentences
        lines.append(sentence(RMC.format(t=f"1200{i:02d}.00")))
    data = _lines(*lines)
    found = sniff(data)
    assert found is not None and found.format == "nmea"
    parsed = nmea.read(data)
    assert parsed.streams["gnss"].num_rows == 20
    assert parsed.stats["truncated"] == 0 and parsed.stats["bad_checksum"] == 0
    assert parsed.stats["sentences"]["VDM"] == 40 and parsed.stats["sentences"]["VDO"] == 20


def test_a_bang_inside_a_text_sentence_is_not_a_sentence_start() -> None:
    text = sentence("GPTXT,01,01,02,ANTENNA OK!")
    parsed = nmea.read(_lines(text, sentence(RMC.format(t="120000"))))
    assert parsed.stats["truncated"] == 0 and parsed.stats["bad_checksum"] == 0
    assert parsed.stats["sentences"]["TXT"] == 1


# -- GNS ---------------------------------------------------------------------------------------

GNS = "{talker}GNS,{t},4807.038,N,01131.000,E,{mode},12,0.8,545.4,46.9,,"


def _gns(t: str, mode: str, talker: str = "GN") -> str:
    return sentence(GNS.format(talker=talker, t=t, mode=mode))


def test_gns_sentences_are_fix_sentences() -> None:
    data = _lines(
        sentence("GPZDA,120000.00,23,03,1994,00,00"),
        _gns("120000.00", "AAN"),
        _gns("120001.00", "DA", talker="GP"),
        _gns("120002.00", "RR"),
    )
    rows = nmea.read(data).streams["gnss"].to_pylist()
    assert len(rows) == 3
    assert [r["fix_quality"] for r in rows] == [1, 2, 4]
    assert rows[0]["ts"] == dt.datetime(1994, 3, 23, 12, 0, tzinfo=dt.UTC)
    assert rows[0]["lat_deg"] == pytest.approx(48 + 7.038 / 60)
    assert (rows[0]["sats"], rows[0]["hdop"], rows[0]["alt_m"]) == (12, 0.8, 545.4)


def test_gns_follows_gga_validity_rules() -> None:
    data = _lines(
        sentence("GPZDA,120000.00,23,03,1994,00,00"),
        _gns("120000.00", "NN"),  # no fix
        _gns("120001.00", "M"),  # manual input: not a fix (GGA 7)
        _gns("120002.00", "S"),  # simulator: not a fix (GGA 8)
        _gns("120003.00", "A"),
    )
    parsed = nmea.read(data)
    assert parsed.streams["gnss"].num_rows == 1
    assert parsed.stats["simulated_epochs"] == 1


# -- no date anywhere --------------------------------------------------------------------------


def _dateless() -> bytes:
    return _lines(*(sentence(GGA.format(t=f"1200{i:02d}.00")) for i in range(12)))


def test_a_log_without_a_date_is_refused_with_a_code_that_says_how_to_give_one() -> None:
    with pytest.raises(SessionStageError) as err:
        _parse(_dateless())
    assert err.value.code == codes.NO_SESSION_DATE
    assert "--date" in str(err.value)


def test_the_upload_date_dates_a_log_without_one() -> None:
    out = _parse(_dateless(), session_date="2024-06-01")
    ts = out.datasets["gnss"].column("ts").to_pylist()
    assert ts[0] == dt.datetime(2024, 6, 1, 12, 0, tzinfo=dt.UTC)
    assert out.summary["readers"][0]["date_source"] == "upload"


def test_a_dated_log_keeps_its_own_date() -> None:
    data = _lines(sentence(RMC.format(t="120000.00")))
    ts = _parse(data, session_date="2024-06-01").datasets["gnss"].column("ts").to_pylist()
    assert ts == [dt.datetime(1994, 3, 23, 12, 0, tzinfo=dt.UTC)]


def test_a_malformed_session_date_is_refused() -> None:
    with pytest.raises(SessionStageError) as err:
        _parse(_dateless(), session_date="June 1st")
    assert err.value.code == codes.NO_SESSION_DATE


def test_a_dateless_log_without_a_fix_is_still_just_no_fix() -> None:
    data = _lines(*(sentence(GGA.format(t=f"1200{i:02d}.00").replace(",E,1,08", ",E,0,08"))
                    for i in range(3)))
    out = _parse(data)
    assert out.summary["gnss_fix"] is False
    assert out.summary["gnss_fix_reason"] == "NO_FIX"
