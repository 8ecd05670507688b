"""GPX 1.1 reader and writer, including Garmin TrackPointExtension."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats import gpx
from stages.batch.formats.sniff import sniff

DOC = b"""<?xml version="1.0" encoding="UTF-8"?>
<gpx version="1.1" creator="Garmin Connect" xmlns="http://www.topografix.com/GPX/1/1"
     xmlns:ns3="http://www.garmin.com/xmlschemas/TrackPointExtension/v1">
  <trk><name>Ride</name><trkseg>
    <trkpt lat="46.5012345" lon="6.6201234">
      <ele>372.4</ele><time>2024-05-01T10:00:00Z</time>
      <extensions><ns3:TrackPointExtension>
        <ns3:atemp>21.5</ns3:atemp><ns3:hr>112</ns3:hr><ns3:cad>80</ns3:cad>
      </ns3:TrackPointExtension></extensions>
    </trkpt>
    <trkpt lat="46.5013000" lon="6.6202000">
      <ele>373.0</ele><time>2024-05-01T10:00:01.500Z</time><hdop>0.9</hdop><sat>11</sat>
      <extensions><ns3:TrackPointExtension><ns3:hr>115</ns3:hr></ns3:TrackPointExtension></extensions>
    </trkpt>
    <trkpt lat="46.6" lon="6.7"><ele>1</ele></trkpt>
    <trkpt lat="46.7" lon="6.8"><time>2024-05-01T10:00:03Z</time><fix>none</fix></trkpt>
  </trkseg></trk>
</gpx>
"""


def test_points_and_trackpoint_extension() -> None:
    parsed = gpx.read(DOC)
    rows = parsed.streams["gnss"].to_pylist()
    assert [r["ts"] for r in rows] == [
        dt.datetime(2024, 5, 1, 10, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 1, 10, 0, 1, 500000, tzinfo=dt.UTC),
    ]
    assert rows[0]["lat_deg"] == 46.5012345
    assert rows[0]["lon_deg"] == 6.6201234
    assert rows[0]["alt_m"] == 372.4
    assert (rows[1]["hdop"], rows[1]["sats"]) == (0.9, 11)
    assert rows[0]["speed_mps"] is None
    aux = parsed.streams["aux"].to_pylist()
    got = sorted((r["ts"].second, r["channel"], r["value"]) for r in aux)
    assert got == [
        (0, "cadence", 80.0),
        (0, "heart_rate", 112.0),
        (0, "temperature", 21.5),
        (1, "heart_rate", 115.0),
    ]
    assert parsed.stats["points"] == 4
    assert parsed.stats["points_without_time_or_fix"] == 2
    assert parsed.units == {}


def _encoded(text: str, encoding: str) -> bytes:
    """``text`` in ``encoding``; ``+bom`` puts the byte-order mark in front of an LE/BE form."""
    name, _, bom = encoding.partition("+")
    if name != "utf-8":
        text = text.replace('encoding="UTF-8"', 'encoding="UTF-16"')
    data = text.encode(name)
    if bom:
        data = ("\ufeff".encode(name)) + data
    return data


# Every way a UTF-8 or UTF-16 document can be spelled: Python's "utf-16" writes a BOM and the
# machine's order; the LE/BE forms without and with a BOM in front.
ENCODINGS = ("utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-16-le+bom", "utf-16-be+bom")

UNSAFE = {
    "internal_entity": '<!DOCTYPE gpx [<!ENTITY a "aaaa">]><gpx version="1.1">&a;</gpx>',
    "entity_expansion": (
        '<!DOCTYPE gpx [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        '<gpx version="1.1"><trk><name>&b;</name></trk></gpx>'
    ),
    "external_entity": (
        '<!DOCTYPE gpx [<!ENTITY x SYSTEM "file:///etc/passwd">]><gpx version="1.1">&x;</gpx>'
    ),
    "parameter_entity": (
        '<!DOCTYPE gpx [<!ENTITY % p SYSTEM "http://example.invalid/p.dtd"> %p;]>'
        '<gpx version="1.1"/>'
    ),
    "external_dtd": '<!DOCTYPE gpx SYSTEM "http://example.invalid/gpx.dtd"><gpx version="1.1"/>',
    "bare_doctype": '<!DOCTYPE gpx><gpx version="1.1"/>',
}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_dtd_entities_and_external_references_are_refused_in_every_encoding(
    kind: str, encoding: str
) -> None:
    """The refusal happens inside the parser, after decoding: a UTF-16 DTD is refused too
    (the old byte search for ``<!DOCTYPE`` never saw it and let the entity expand)."""
    evil = _encoded('<?xml version="1.0" encoding="UTF-8"?>' + UNSAFE[kind], encoding)
    with pytest.raises(SessionStageError) as err:
        gpx.read(evil)
    assert err.value.code == "UNSUPPORTED_FORMAT"
    assert err.value.retriable is False


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_dtd_without_xml_declaration_is_refused(encoding: str) -> None:
    with pytest.raises(SessionStageError) as err:
        gpx.read(_encoded(UNSAFE["internal_entity"], encoding))
    assert err.value.code == "UNSUPPORTED_FORMAT"


@pytest.mark.parametrize("encoding", ENCODINGS[1:])
def test_utf16_gpx_parses_to_the_same_samples_as_its_utf8_twin(encoding: str) -> None:
    twin = gpx.read(_encoded(DOC.decode(), encoding))
    utf8 = gpx.read(DOC)
    for stream, table in utf8.streams.items():
        assert twin.streams[stream].equals(table), stream
    assert twin.stats == utf8.stats
    assert utf8.streams["gnss"].num_rows == 2


@pytest.mark.parametrize("encoding", ENCODINGS[1:])
def test_utf16_gpx_is_sniffed_as_gpx(encoding: str) -> None:
    found = sniff(_encoded(DOC.decode(), encoding))
    assert found is not None
    assert (found.format, found.variant) == ("gpx", "1.1")
    assert found.hints["garmin_trackpoint_extension"] is True


def test_malformed_xml_is_corrupt() -> None:
    with pytest.raises(SessionStageError) as err:
        gpx.read(DOC[: len(DOC) // 2])
    assert err.value.code == "CORRUPT_ARTIFACT"


def test_other_xml_is_unsupported() -> None:
    with pytest.raises(SessionStageError) as err:
        gpx.read(b"<kml><Document/></kml>")
    assert err.value.code == "UNSUPPORTED_FORMAT"


def test_writer_round_trip_with_speed_and_aux() -> None:
    ts = pa.array([1_714_557_600_000_000, 1_714_557_600_250_000], canonical.TS_TYPE)
    gnss = canonical.conform(
        "gnss",
        pa.table(
            {
                "ts": ts,
                "lat_deg": [51.123456789, 51.1234],
                "lon_deg": [-0.5, -0.49999],
                "alt_m": [10.0, None],
                "speed_mps": [12.5, 13.0],
                "course_deg": [270.0, None],
            }
        ),
    )
    aux = canonical.conform(
        "aux",
        pa.table({"ts": ts, "channel": ["heart_rate", "temperature"], "value": [140.0, 19.5]}),
    )
    back = gpx.read(gpx.write({"gnss": gnss, "aux": aux}))
    rows = back.streams["gnss"].to_pylist()
    assert [r["ts"] for r in rows] == ts.to_pylist()
    assert rows[0]["lat_deg"] == pytest.approx(51.123456789, abs=1e-8)
    assert rows[1]["lon_deg"] == pytest.approx(-0.49999, abs=1e-8)
    assert [r["speed_mps"] for r in rows] == [12.5, 13.0]
    assert [r["course_deg"] for r in rows] == [270.0, None]
    assert [r["alt_m"] for r in rows] == [10.0, None]
    assert back.streams["aux"].select(["channel", "value"]).to_pylist() == [
        {"channel": "heart_rate", "value": 140.0},
        {"channel": "temperature", "value": 19.5},
    ]
