"""The track library: its data, detection from a session's location, and resolve's precedence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from schemas.run_config import RunConfig, StartFinish, TrackConfig, parse_run_config
from stages.batch import track_library as tl
from stages.batch.contract import SessionStageError
from stages.batch.geo import GnssFixes, LocalFrame, path_distance
from stages.batch.synth import SyntheticSession, synthesize


def _positions(s: SyntheticSession) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """lat, lon, speed as detect_laps' Motion has them from ``gnss``."""
    fixes = GnssFixes.from_table(s.gnss)
    e, n = LocalFrame.around(fixes.lat, fixes.lon).to_en(fixes.lat, fixes.lon)
    return fixes.lat, fixes.lon, fixes.ground_speed(e, n)


def _silverstone() -> tl.Track:
    track = tl.by_name("silverstone")
    assert track is not None
    return track


def test_the_library_is_real_circuits_with_their_source_named() -> None:
    tracks = tl.library()
    assert 8 <= len(tracks) <= 12
    assert "bacinger/f1-circuits" in tl.attribution() and "MIT" in tl.attribution()
    for track in tracks:
        assert track.source == "library" and track.key and track.finish is None
        assert track.reference and "bacinger/f1-circuits" in track.reference
        assert len(track.sectors) == 2  # three sectors
        lat, lon = track.centreline
        frame = LocalFrame(lat0_deg=float(lat[0]), lon0_deg=float(lon[0]))
        e, n = frame.to_en(np.append(lat, lat[0]), np.append(lon, lon[0]))
        assert 3000 < path_distance(e, n)[-1] < 7500  # an F1 circuit's length
        for line in (track.start_finish, *track.sectors):  # ~50 m across the track
            le, ln = frame.to_en(np.array([line.lat1, line.lat2]),
                                 np.array([line.lon1, line.lon2]))
            assert 49.0 < math.hypot(le[1] - le[0], ln[1] - ln[0]) < 51.0
    assert tl.library() is tracks  # read once


def test_library_tracks_are_found_by_name_id_or_location_in_any_case() -> None:
    sil = _silverstone()
    assert sil.key == "gb-1948"
    for name in ("Silverstone Circuit", "GB-1948", "SILVERSTONE"):
        assert tl.by_name(name) == sil
    assert tl.by_name("Brands Hatch") is None


def test_a_session_on_silverstone_is_detected_as_silverstone() -> None:
    sil = _silverstone()
    s = synthesize(laps=3, seed=1, centreline=sil.centreline)
    lat, lon, speed = _positions(s)
    assert tl.detect(lat, lon, speed, tl.library()) == sil
    # The truth is timed at the library's own line: one crossing per lap boundary.
    crossings = s.truth.crossing_times(sil.start_finish.model_dump())
    starts = [lap.start_s for lap in s.truth.laps] + [s.truth.laps[-1].end_s]
    assert np.allclose(crossings, starts, atol=0.05)
    for line in sil.sectors:  # each sector line once a lap
        assert s.truth.crossing_times(line.model_dump()).size in (3, 4)


@pytest.mark.parametrize("seed", range(6))
def test_random_synthetic_circuits_near_silverstone_match_no_library_track(seed: int) -> None:
    # synthesize()'s origin is inside Silverstone's outline: nearness alone must not match.
    lat, lon, speed = _positions(synthesize(laps=5, seed=seed))
    assert tl.detect(lat, lon, speed, tl.library()) is None


def test_a_session_parked_or_too_short_matches_nothing() -> None:
    sil = _silverstone()
    lat, lon = sil.centreline
    assert tl.detect(lat, lon, np.zeros(lat.size), tl.library()) is None  # not moving
    assert tl.detect(lat[:5], lon[:5], np.full(5, 30.0), tl.library()) is None
    assert tl.detect(lat, lon, np.full(lat.size, 30.0), ()) is None


def test_one_lap_of_silverstone_is_not_a_circuit_session() -> None:
    # The line must be crossed twice in one direction: a single drive past it is not laps.
    sil = _silverstone()
    lat, lon = sil.centreline
    keep = slice(5, lat.size - 5)  # most of one lap, crossing the line not at all
    e, n = LocalFrame(lat0_deg=float(lat[0]), lon0_deg=float(lon[0])).to_en(lat, lon)
    assert path_distance(e[keep], n[keep])[-1] > 4000
    dense = np.linspace(0, 1, 2000)
    idx = np.arange(lat.size)[keep]
    la = np.interp(dense, np.linspace(0, 1, idx.size), lat[idx])
    lo = np.interp(dense, np.linspace(0, 1, idx.size), lon[idx])
    assert tl.detect(la, lo, np.full(la.size, 30.0), tl.library()) is None


def test_a_saved_track_is_detected_on_a_later_session() -> None:
    first = synthesize(laps=3, seed=4)
    assert first.truth.start_finish is not None
    saved = TrackConfig(name="home kart track",
                        start_finish=StartFinish(**first.truth.start_finish))
    config = RunConfig(tracks=[saved])
    later = synthesize(laps=2, seed=4, gnss_noise_m=3.0, gnss_hz=5.0)  # same track, new day
    found = tl.resolve(config, *_positions(later))
    assert found is not None and found.name == "home kart track" and found.source == "saved"
    assert found.start_finish == saved.start_finish
    # Far away (Spa), the saved line is not crossed: the library's circuit is found instead.
    spa = tl.by_name("spa francorchamps")
    assert spa is not None
    abroad = synthesize(laps=2, seed=4, centreline=spa.centreline)
    assert tl.resolve(config, *_positions(abroad)) == spa


def test_a_point_to_point_stage_needs_its_start_then_its_finish() -> None:
    # A stage along the first 2.5 km of Spa's outline, driven once from end to end.
    spa = tl.by_name("be-1925")
    assert spa is not None
    lat, lon = spa.centreline
    frame = LocalFrame(lat0_deg=float(lat[0]), lon0_deg=float(lon[0]))
    e, n = frame.to_en(lat, lon)
    d = path_distance(e, n)
    road = d <= 2500.0
    s = synthesize(laps=1, seed=3, closed=False, centreline=(lat[road], lon[road]))
    start = s.truth.line_across(s.truth.laps[0].start_s if s.truth.laps else 20.0)
    end_t = s.truth.duration_s - 15.0
    stage = TrackConfig(name="la source stage", start_finish=StartFinish(**start),
                        finish=StartFinish(**s.truth.line_across(end_t)))
    lat_s, lon_s, speed = _positions(s)
    found = tl.detect(lat_s, lon_s, speed, [tl.Track.from_config(stage)])
    assert found is not None and found.point_to_point
    # Driven the other way round (finish first), it is not the stage.
    assert tl.detect(lat_s[::-1], lon_s[::-1], speed[::-1],
                     [tl.Track.from_config(stage)]) is None


def test_resolve_precedence_config_then_name_then_saved_then_library() -> None:
    sil = _silverstone()
    lat, lon, speed = _positions(synthesize(laps=2, seed=1, centreline=sil.centreline))
    line = StartFinish(lat1=52.0, lon1=-1.0, lat2=52.0001, lon2=-1.0)
    mine = TrackConfig(name="Club circuit", start_finish=sil.sectors[0])
    # 1. The config's own lines, whatever else is set.
    got = tl.resolve(RunConfig(start_finish=line, finish=line, sectors=[line], track="x"),
                     lat, lon, speed)
    assert got is not None and got.source == "config" and got.point_to_point
    assert got.sectors == (line,)
    # 2. By name: saved before the library; "none" is none; unknown is an error.
    by_name = tl.resolve(parse_run_config({"track": "club CIRCUIT",
                                           "tracks": [mine.model_dump()]}), lat, lon, speed)
    assert by_name is not None and by_name.source == "saved"
    assert tl.resolve(RunConfig(track="gb-1948"), lat, lon, speed) == sil
    assert tl.resolve(RunConfig(track="None"), lat, lon, speed) is None
    with pytest.raises(SessionStageError) as err:
        tl.resolve(RunConfig(track="Nordschleife"), lat, lon, speed)
    assert err.value.code == "UNKNOWN_TRACK" and err.value.retriable is False
    # 3. Detected: the library when no saved track matches...
    assert tl.resolve(RunConfig(), lat, lon, speed) == sil
    # ... and a saved track crossed twice a lap wins over it.
    detected = tl.resolve(RunConfig(tracks=[mine]), lat, lon, speed)
    assert detected is not None and detected.name == "Club circuit"
    # 4. Nothing known: None (detect_laps finds a line of its own).
    lat2, lon2, speed2 = _positions(synthesize(laps=2, seed=9))
    assert tl.resolve(RunConfig(), lat2, lon2, speed2) is None


def test_track_round_trips_through_its_config() -> None:
    sil = _silverstone()
    cfg = sil.to_config()
    again = tl.Track.from_config(cfg)
    assert again.start_finish == sil.start_finish and again.sectors == sil.sectors
    assert again.source == "saved" and again.centreline[0].size == 0
