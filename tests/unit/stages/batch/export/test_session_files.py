"""The session's GPX and FIT exports from a synthetic session run through the analysis chain:
the GPX reads back with Tideway's own reader, one segment per lap; the FIT decodes with
fitdecode, one lap message per lap with its exact time; and the declaration table agrees with
the CLI's choices."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa
from defusedxml.ElementTree import fromstring

from stages.batch.export.files import EXPORTS
from stages.batch.export.positions import export_track, lap_segments
from stages.batch.formats import gpx
from stages.batch.formats.gpx import GPX_NS, TIDEWAY_NS
from stages.batch.geo import ts_micros
from streams.cli.sessions import CSV_TABLES, EXPORT_FORMATS
from tests.fit_file import messages as fit_messages
from tests.unit.stages.batch.sessions import position_rms, run_chain, session

_SEMICIRCLE = 180.0 / 2**31


@lru_cache(maxsize=2)
def _tables(fusion: bool) -> dict[str, pa.Table]:
    s = session(laps=3, seed=11)
    given = {"gnss": s.gnss, "imu": s.imu} if fusion else {"gnss": s.gnss}
    tables, _ = run_chain(given, {"start_finish": s.truth.start_finish})
    return tables


def _export(name: str, tables: dict[str, pa.Table]) -> bytes:
    spec = EXPORTS[name]
    return spec.write({n: tables[n] for n in (*spec.needs, *spec.uses) if n in tables})


def test_the_table_offers_what_the_cli_does() -> None:
    assert {f.format for f in EXPORTS.values()} == set(EXPORT_FORMATS)
    assert [f.what for f in EXPORTS.values() if f.format == "csv"] == list(CSV_TABLES)
    assert all(name == f"{f.what}.{f.format}" for name, f in EXPORTS.items())


def test_positions_are_the_fused_estimate_at_each_fix() -> None:
    tables, s = _tables(True), session(laps=3, seed=11)
    track = export_track(tables)
    assert track.source == "fused"
    assert track.gnss.num_rows == s.gnss.num_rows  # one point per fix, at the fix's time
    assert ts_micros(track.gnss).tolist() == ts_micros(s.gnss).tolist()
    # Fusion's smoothing, not the fixes' 2 m of noise.
    assert position_rms(s, track.gnss) < 0.5 * position_rms(s, s.gnss)
    assert track.gnss.column("alt_m").equals(s.gnss.column("alt_m"))
    assert export_track(_tables(False)).source == "gnss"


def test_gpx_has_one_segment_per_lap_and_reads_back_point_for_point() -> None:
    tables = _tables(True)
    data = _export("session.gpx", tables)
    points = export_track(tables).gnss
    back = gpx.read(data).streams["gnss"]
    assert back.num_rows == points.num_rows
    assert ts_micros(back).tolist() == ts_micros(points).tolist()
    for col, tol in (("lat_deg", 1e-8), ("lon_deg", 1e-8), ("alt_m", 1e-3), ("speed_mps", 1e-4)):
        diff = np.abs(back.column(col).to_numpy() - points.column(col).to_numpy())
        assert float(diff.max()) <= tol, col
    root = fromstring(data)
    tracks = root.findall(f"{{{GPX_NS}}}trk")
    assert len(tracks) == 1
    segments = tracks[0].findall(f"{{{GPX_NS}}}trkseg")
    labels = [seg.findtext(f"{{{GPX_NS}}}extensions/{{{TIDEWAY_NS}}}lap") for seg in segments]
    laps = tables["laps"].to_pylist()
    # An out lap before the first crossing and an in lap after the last, unlabelled.
    assert labels == [None, *(str(lap["lap"]) for lap in laps), None]
    for seg, lap in zip(segments[1:-1], laps, strict=True):
        times = [p.findtext(f"{{{GPX_NS}}}time") for p in seg.findall(f"{{{GPX_NS}}}trkpt")]
        first, last = (pa.scalar(t).cast(pa.timestamp("us", tz="UTC")).as_py()
                       for t in (times[0], times[-1]))  # fmt: skip
        assert lap["start_ts"] <= first and last < lap["end_ts"]


def test_fit_has_one_lap_message_per_lap_with_its_exact_time() -> None:
    tables = _tables(True)
    msgs = fit_messages(_export("session.fit", tables))
    laps = tables["laps"].to_pylist()
    metrics = {m["lap"]: m for m in tables["lap_metrics"].to_pylist()}
    assert len(msgs["lap"]) == len(laps) == 3
    for msg, lap in zip(msgs["lap"], laps, strict=True):
        assert abs(msg["total_elapsed_time"] - lap["lap_time_s"]) <= 0.0005
        assert abs(msg["total_timer_time"] - lap["lap_time_s"]) <= 0.0005
        assert abs(msg["total_distance"] - lap["distance_m"]) <= 0.005
        assert msg["start_time"] == lap["start_ts"].replace(microsecond=0)
        assert abs(msg["enhanced_max_speed"] - metrics[lap["lap"]]["max_speed_mps"]) <= 0.001
    (sess,) = msgs["session"]
    assert sess["num_laps"] == 3 and sess["total_distance"] > sum(m["distance_m"] for m in laps)
    assert len(msgs["activity"]) == 1
    # Records at whole seconds, where the export's track was then.
    points = export_track(tables).gnss
    ts = ts_micros(points) / 1e6
    records = msgs["record"]
    assert len(records) >= int(ts[-1] - ts[0])
    for rec in records[::25]:
        t = rec["timestamp"].timestamp()
        lat = np.interp(t, ts, points.column("lat_deg").to_numpy())
        lon = np.interp(t, ts, points.column("lon_deg").to_numpy())
        assert abs(rec["position_lat"] * _SEMICIRCLE - lat) < 1e-6
        assert abs(rec["position_long"] * _SEMICIRCLE - lon) < 1e-6


def test_a_session_without_laps_is_one_segment_and_one_whole_lap() -> None:
    s = session(laps=2, seed=4, closed=False)
    tables = {"gnss": s.gnss}
    assert len(lap_segments(ts_micros(s.gnss), None)) == 1
    data = _export("session.gpx", tables)
    assert data.count(b"<trkseg>") == 1 and b"tideway:lap" not in data
    msgs = fit_messages(_export("session.fit", tables))
    (lap,) = msgs["lap"]
    assert lap["lap_trigger"] == "session_end"
    assert lap["total_elapsed_time"] == msgs["session"][0]["total_elapsed_time"]
