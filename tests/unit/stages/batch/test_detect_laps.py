"""detect_laps against synthetic truth: exact lap counts, lap times within 0.05 s, pits."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import detect_laps
from stages.batch.canonical import GNSS_SCHEMA
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.batch.synth import SyntheticSession
from tests.unit.stages.batch.sessions import fused, seconds, session


def _laps(s: SyntheticSession, *, use_fused: bool, line: bool, **kw: object) -> StageOutput:
    ds = {"gnss": s.gnss, "imu": s.imu}
    if use_fused:
        ds |= fused(**kw).datasets
    config = {"start_finish": s.truth.start_finish} if line else {}
    return detect_laps.run(StageInput(datasets=ds, config=config))


CASES = [(0, 2), (1, 3), (2, 4), (5, 3), (6, 2)]


@pytest.mark.parametrize(("seed", "laps"), CASES)
def test_configured_line_gives_exact_count_and_times(seed: int, laps: int) -> None:
    s = session(laps=laps, seed=seed)
    out = _laps(s, use_fused=True, line=True, laps=laps, seed=seed)
    table = out.datasets["laps"]
    assert out.summary["lap_count"] == laps == table.num_rows
    assert out.summary["source"] == "fused" and out.summary["line"]["source"] == "config"
    truth = np.array([lap.lap_time_s for lap in s.truth.laps])
    assert np.abs(table.column("lap_time_s").to_numpy() - truth).max() <= 0.05
    starts = np.array([lap.start_s for lap in s.truth.laps])
    assert np.abs(seconds(s, table, "start_ts") - starts).max() <= 0.05
    assert table.column("valid").to_pylist() == [True] * laps


@pytest.mark.parametrize(("seed", "laps"), CASES)
def test_auto_line_laps_match_true_crossings_of_that_line(seed: int, laps: int) -> None:
    s = session(laps=laps, seed=seed)
    out = _laps(s, use_fused=True, line=False, laps=laps, seed=seed)
    line = out.summary["line"]
    assert line["source"] == "auto"
    true_cross = s.truth.crossing_times(line)
    table = out.datasets["laps"]
    # Laps are timed at the line the stage chose; truth is the true path crossing that line.
    assert table.num_rows == true_cross.size - 1 >= laps - 1
    assert np.abs(table.column("lap_time_s").to_numpy() - np.diff(true_cross)).max() <= 0.05


@pytest.mark.parametrize(("seed", "laps"), [(0, 2), (3, 3), (5, 4)])
def test_gnss_only_laps_are_counted_exactly(seed: int, laps: int) -> None:
    s = session(laps=laps, seed=seed)
    out = detect_laps.run(StageInput(datasets={"gnss": s.gnss},
                                     config={"start_finish": s.truth.start_finish}))
    assert out.summary["source"] == "gnss" and out.summary["lap_count"] == laps
    truth = np.array([lap.lap_time_s for lap in s.truth.laps])
    lap_times = out.datasets["laps"].column("lap_time_s").to_numpy()
    # 2 m GNSS noise at 10 Hz and no IMU: measured worst case 0.15 s over 20 random sessions.
    assert np.abs(lap_times - truth).max() <= 0.2


@pytest.mark.parametrize("use_fused", [True, False])
def test_pit_lap_is_flagged_and_not_valid(use_fused: bool) -> None:
    s = session(laps=4, seed=1, pit_lap=2)
    out = _laps(s, use_fused=use_fused, line=True, laps=4, seed=1, pit_lap=2)
    t = out.datasets["laps"]
    assert t.num_rows == 4
    assert t.column("pit_in").to_pylist() == [lap.pit_in for lap in s.truth.laps]
    assert t.column("pit_out").to_pylist() == [lap.pit_out for lap in s.truth.laps]
    assert t.column("valid").to_pylist() == [True, False, False, True]
    assert out.summary["pit_laps"] == [2, 3]
    assert t.column("stopped_s").to_pylist()[1] >= 7.0  # the 8 s stop at the pit box
    truth = np.array([lap.lap_time_s for lap in s.truth.laps])
    tol = 0.05 if use_fused else 0.1
    assert np.abs(t.column("lap_time_s").to_numpy() - truth).max() <= tol


@pytest.mark.parametrize("use_fused", [True, False])
def test_open_road_never_gets_laps(use_fused: bool) -> None:
    s = session(laps=3, seed=4, closed=False)
    out = _laps(s, use_fused=use_fused, line=False, laps=3, seed=4, closed=False)
    assert out.summary["lap_count"] == 0 and out.summary["reason"] == "TRACK_NOT_CLOSED"
    assert out.summary["laps_available"] is False and out.datasets["laps"].num_rows == 0


def test_a_line_crossed_once_gives_no_lap() -> None:
    s = session(laps=3, seed=4, closed=False)
    frame = s.truth.frame
    i = s.truth.imu_t.size // 2  # across the road half-way along it
    e, n = s.truth.imu_e[i], s.truth.imu_n[i]
    de, dn = s.truth.imu_e[i + 50] - e, s.truth.imu_n[i + 50] - n
    k = 20.0 / math.hypot(de, dn)
    lat, lon = frame.to_latlon(np.array([e - dn * k, e + dn * k]),
                               np.array([n + de * k, n - de * k]))
    line = {"lat1": lat[0], "lon1": lon[0], "lat2": lat[1], "lon2": lon[1]}
    out = detect_laps.run(StageInput(datasets={"gnss": s.gnss}, config={"start_finish": line}))
    assert out.summary["reason"] == "NO_LINE_CROSSINGS" and out.summary["crossings"] == 1
    assert out.datasets["laps"].num_rows == 0


def _circle(laps: int, wiggle_at: float | None = None) -> pa.Table:
    """A 100 m-radius circle at 20 m/s sampled at 10 Hz (lap = 2π·100/20 ≈ 31.416 s)."""
    t = np.arange(0.0, laps * 2 * math.pi * 5 + 2.0, 0.1)
    ang = t * 0.2 - 0.2  # start a little before the line at angle 0
    r = np.full_like(t, 100.0)
    if wiggle_at is not None:  # back-and-forth across the line near one crossing
        near = np.abs(t - wiggle_at) < 0.3
        ang[near] = 0.004 * np.sign(np.sin((t[near] - wiggle_at) * 40))
    e, n = r * np.cos(ang), r * np.sin(ang)
    lat = 52.0 + n / 111_200.0
    lon = -1.0 + e / (111_200.0 * math.cos(math.radians(52.0)))
    ts = (1_717_236_000_000_000 + np.round(t * 1e6)).astype(np.int64)
    return pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC")), "lat_deg": lat,
                     "lon_deg": lon, "speed_mps": np.full_like(t, 20.0)}).cast(
        pa.schema([GNSS_SCHEMA.field(c) for c in ("ts", "lat_deg", "lon_deg", "speed_mps")]))


def test_circle_laps_are_exact_and_crossing_jitter_is_debounced() -> None:
    line = {"lat1": 52.0, "lon1": -1.0 + 90 / (111_200.0 * math.cos(math.radians(52.0))),
            "lat2": 52.0, "lon2": -1.0 + 110 / (111_200.0 * math.cos(math.radians(52.0)))}
    out = detect_laps.run(StageInput(datasets={"gnss": _circle(4)},
                                     config={"start_finish": line}))
    times = out.datasets["laps"].column("lap_time_s").to_numpy()
    assert times.size == 4 and np.allclose(times, 10 * math.pi, atol=0.005)
    jitter = detect_laps.run(StageInput(datasets={"gnss": _circle(4, wiggle_at=1.0)},
                                        config={"start_finish": line}))
    assert jitter.summary["lap_count"] == 4 and jitter.summary["debounced"] >= 1
    auto = detect_laps.run(StageInput(datasets={"gnss": _circle(4)}))
    assert auto.summary["line"]["source"] == "auto" and auto.summary["lap_count"] >= 3
    assert np.allclose(auto.datasets["laps"].column("lap_time_s").to_numpy(), 10 * math.pi,
                       atol=0.01)


def test_bad_inputs() -> None:
    with pytest.raises(SessionStageError) as err:
        detect_laps.run(StageInput(datasets={"gnss": _circle(2)},
                                   config={"start_finish": {"lat1": 52.0}}))
    assert err.value.code == "INVALID_START_FINISH" and err.value.retriable is False
    with pytest.raises(SessionStageError):
        detect_laps.run(StageInput(datasets={"gnss": _circle(2)}, config={"start_finish": {
            "lat1": 52.0, "lon1": -1.0, "lat2": 52.0, "lon2": -1.0}}))
    empty = detect_laps.run(StageInput())
    assert empty.summary["reason"] == "NO_POSITION_DATA" and empty.datasets["laps"].num_rows == 0


def _gnss_with(s: SyntheticSession, keep: np.ndarray, e: np.ndarray, n: np.ndarray) -> pa.Table:
    lat, lon = s.truth.frame.to_latlon(e, n)
    g = s.gnss.set_column(1, "lat_deg", pa.array(lat)).set_column(2, "lon_deg", pa.array(lon))
    return g.filter(pa.array(keep))


@pytest.mark.parametrize("seed", [0, 3])
def test_a_ride_that_ends_where_it_began_is_not_closed(seed: int) -> None:
    """Issue 32 item 7: the found line went through the ride's first fix, which a ride that
    ends where it began passes once (at its end): NO_LINE_CROSSINGS, a reason for configured
    lines. One loop from a point mid-lap back to just before it: no line, TRACK_NOT_CLOSED."""
    s = session(laps=2, seed=seed)
    truth_t, te, tn = s.truth.gnss_t, s.truth.gnss_e, s.truth.gnss_n
    first = int(np.searchsorted(truth_t, s.truth.laps[0].start_s + 25.0))
    later = np.flatnonzero(truth_t > truth_t[first] + 0.8 * s.truth.laps[0].lap_time_s)
    back = int(later[np.argmin(np.hypot(te[later] - te[first], tn[later] - tn[first]))])
    keep = (np.arange(truth_t.size) >= first) & (np.arange(truth_t.size) < back - 2)
    e, n = s.truth.frame.to_en(s.gnss.column("lat_deg").to_numpy(),
                               s.gnss.column("lon_deg").to_numpy())
    out = detect_laps.run(StageInput(datasets={"gnss": _gnss_with(s, keep, e, n)}))
    assert out.summary["reason"] == "TRACK_NOT_CLOSED" and out.summary["line"] is None
    assert out.summary["lap_count"] == 0 and out.datasets["laps"].num_rows == 0


def test_a_configured_line_crossed_once_keeps_its_reason() -> None:
    s = session(laps=2, seed=0)
    t = seconds(s, s.gnss)
    keep = t < s.truth.laps[0].end_s - 20.0  # only the first crossing of the line
    e, n = s.truth.frame.to_en(s.gnss.column("lat_deg").to_numpy(),
                               s.gnss.column("lon_deg").to_numpy())
    out = detect_laps.run(StageInput(datasets={"gnss": _gnss_with(s, keep, e, n)},
                                     config={"start_finish": s.truth.start_finish}))
    assert out.summary["reason"] == "NO_LINE_CROSSINGS" and out.summary["crossings"] == 1


@pytest.mark.parametrize("seed", [0, 2])
def test_two_laps_a_few_metres_apart_are_not_pit_laps(seed: int) -> None:
    """Issue 32 item 7: two loops that run 5.7 m apart were both pit laps (the 6 m test with
    each as the other's only reference), so the session had no best lap. With two laps
    neither can be said to have left the line."""
    s = session(laps=2, seed=seed)
    t = seconds(s, s.gnss)
    lap2 = s.truth.laps[1]
    e, n = s.truth.frame.to_en(s.gnss.column("lat_deg").to_numpy(),
                               s.gnss.column("lon_deg").to_numpy())
    heading = np.arctan2(np.gradient(s.truth.gnss_n), np.gradient(s.truth.gnss_e))
    apart = (t > lap2.start_s + 8.0) & (t < lap2.end_s - 8.0)  # lap 2: 5.7 m to the left
    e = np.where(apart, e - 5.7 * np.sin(heading), e)
    n = np.where(apart, n + 5.7 * np.cos(heading), n)
    gnss = _gnss_with(s, np.ones(t.size, dtype=bool), e, n)
    out = detect_laps.run(StageInput(datasets={"gnss": gnss},
                                     config={"start_finish": s.truth.start_finish}))
    laps = out.datasets["laps"]
    assert laps.num_rows == 2 and out.summary["pit_laps"] == []
    assert laps.column("pit").to_pylist() == [False, False]
    assert laps.column("valid").to_pylist() == [True, True]


def test_a_run_of_two_loops_finds_its_line() -> None:
    """Real file: a 6.8 km run, two loops of the same 3.4 km course at about 2 m/s. The
    search for a found line started at the first sample at 5 m/s, which a runner never
    reaches: TRACK_NOT_CLOSED for a track that does close. It starts at ``stop_speed_mps``."""
    from stages.batch import artifact_classify, normalise_units, parse_raw, time_align
    from tests.shared_data import SharedFile
    from tests.unit.stages.batch.sample_streams import blob

    f = SharedFile(folder="fit", name="developer-types-sample.fit")
    art = (blob(f.name, f.read_bytes()),)
    classified = artifact_classify.run(StageInput(artifacts=art))
    parsed = parse_raw.run(
        StageInput(artifacts=art, summaries={"artifact_classify": classified.summary})
    )
    norm = normalise_units.run(
        StageInput(datasets=parsed.datasets, summaries={"parse_raw": parsed.summary})
    )
    aligned = time_align.run(StageInput(datasets=norm.datasets))
    out = detect_laps.run(StageInput(datasets=dict(aligned.datasets)))
    assert out.summary["reason"] is None and out.summary["line"]["source"] == "auto"
    laps = out.datasets["laps"]
    assert laps.num_rows == 1 and laps.column("valid").to_pylist() == [True]
    # One loop of the course (the path through the fixes is 6.8 km in all).
    assert 3_300 < laps.column("distance_m")[0].as_py() < 3_450
