"""The synthetic session generator: determinism, canonical tables, physics and truth."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from stages.batch.canonical import GNSS_SCHEMA, IMU_SCHEMA
from stages.batch.synth import synthesize
from tests.unit.stages.batch.sessions import seconds, session


def test_same_seed_gives_identical_session() -> None:
    a, b = synthesize(laps=2, seed=7), synthesize(laps=2, seed=7)
    assert a.gnss.equals(b.gnss) and a.imu.equals(b.imu)
    assert a.truth.truth_json() == b.truth.truth_json()
    c = synthesize(laps=2, seed=8)
    assert not a.gnss.equals(c.gnss)


def test_tables_are_canonical_and_at_the_requested_rates() -> None:
    s = session(laps=2, seed=1, imu_hz=50.0, gnss_hz=5.0)
    assert s.imu.schema.equals(IMU_SCHEMA) and s.gnss.schema.equals(GNSS_SCHEMA)
    for table, hz in ((s.imu, 50.0), (s.gnss, 5.0)):
        step = np.diff(seconds(s, table))
        assert np.allclose(step, 1.0 / hz, atol=2e-6)
    at_rest = s.imu.column("az_mps2").to_numpy()[:100]  # standing start
    assert abs(float(np.median(at_rest)) - 9.81) < 0.3


def test_truth_laps_agree_with_line_crossings_of_the_true_path() -> None:
    s = session(laps=3, seed=2)
    tr = s.truth
    assert len(tr.laps) == 3 and tr.start_finish is not None
    crossings = tr.crossing_times(tr.start_finish)
    starts = [lap.start_s for lap in tr.laps] + [tr.laps[-1].end_s]
    assert np.allclose(crossings, starts, atol=0.01)
    assert all(lap.lap_time_s > 30 for lap in tr.laps)
    assert len({round(lap.lap_time_s, 1) for lap in tr.laps}) == 3  # laps differ in pace


@pytest.mark.parametrize("seed", [0, 3])
def test_noiseless_imu_integrates_back_to_the_true_path(seed: int) -> None:
    s = synthesize(laps=1, seed=seed, imu_accel_noise=0.0, imu_gyro_noise=0.0, imu_bias=False)
    tr, imu = s.truth, s.imu
    t = tr.imu_t
    ax, ay, gz = (imu.column(c).to_numpy() for c in ("ax_mps2", "ay_mps2", "gz_rps"))
    for start in (20.0, 50.0):
        i0 = int(np.searchsorted(t, start))
        sl = slice(i0 - 1, i0 + 1001)  # 10 s at 100 Hz
        e, n = tr.imu_e[sl], tr.imu_n[sl]
        h = t[i0] - t[i0 - 1]
        ve0, vn0 = (e[2] - e[0]) / (2 * h), (n[2] - n[0]) / (2 * h)
        psi = math.atan2(vn0, ve0) + np.concatenate(
            ([0.0], np.cumsum(0.5 * (gz[sl][2:] + gz[sl][1:-1]) * h)))
        a_e = ax[sl][1:] * np.cos(psi) - ay[sl][1:] * np.sin(psi)
        a_n = ax[sl][1:] * np.sin(psi) + ay[sl][1:] * np.cos(psi)
        ve = ve0 + np.concatenate(([0.0], np.cumsum(0.5 * (a_e[1:] + a_e[:-1]) * h)))
        vn = vn0 + np.concatenate(([0.0], np.cumsum(0.5 * (a_n[1:] + a_n[:-1]) * h)))
        pe = e[1] + np.concatenate(([0.0], np.cumsum(0.5 * (ve[1:] + ve[:-1]) * h)))
        pn = n[1] + np.concatenate(([0.0], np.cumsum(0.5 * (vn[1:] + vn[:-1]) * h)))
        drift = np.hypot(pe - e[1:], pn - n[1:]).max()
        assert drift < 0.5, f"dead reckoning drifted {drift:.2f} m in 10 s"


def test_jumps_are_free_fall_then_landing_spike() -> None:
    s = session(laps=2, seed=1)
    assert s.truth.jumps, "a non-flat track has jumps"
    t = seconds(s, s.imu)
    az = s.imu.column("az_mps2").to_numpy()
    for j in s.truth.jumps:
        air = (t > j.takeoff_s + 0.05) & (t < j.landing_s - 0.05)
        assert np.abs(az[air]).max() < 1.0
        land = (t >= j.landing_s) & (t < j.landing_s + 0.15)
        assert az[land].max() > 1.8 * 9.81
        assert 0.5 < j.airtime_s < 1.3


def test_flat_track_has_no_jumps_and_open_track_no_laps() -> None:
    flat = session(laps=2, seed=4, flat=True)
    assert flat.truth.jumps == ()
    assert flat.imu.column("az_mps2").to_numpy().min() > 8.0
    road = session(laps=2, seed=4, closed=False)
    assert road.truth.laps == () and road.truth.start_finish is None
    e = road.truth.imu_e
    assert e[-1] - e[0] > 2000  # it goes somewhere and never comes back
    assert np.all(np.diff(e[::100]) >= -1e-6)
    assert len(road.truth.corners) > 5


def test_pit_lap_detours_stops_and_is_slow() -> None:
    s = session(laps=3, seed=1, pit_lap=2)
    plain = session(laps=3, seed=1)
    laps = s.truth.laps
    assert [lap.pit_in for lap in laps] == [False, True, False]
    assert [lap.pit_out for lap in laps] == [False, False, True]
    assert laps[1].lap_time_s > plain.truth.laps[1].lap_time_s + 8.0  # includes an 8 s stop
    # The pit lane runs 12 m right of the main straight (which heads east through the origin).
    t = s.truth.imu_t
    in_lane = np.abs(t - laps[1].end_s) < 1.0
    assert np.allclose(s.truth.imu_n[in_lane], -12.0, atol=0.05)
    on_track = np.abs(plain.truth.imu_t - plain.truth.laps[1].end_s) < 1.0
    assert np.allclose(plain.truth.imu_n[on_track], 0.0, atol=0.05)


def test_gnss_noise_and_gaps_are_as_configured() -> None:
    s = session(laps=2, seed=3, gnss_gaps=((60.0, 10.0),))
    tr = s.truth
    e, n = tr.frame.to_en(s.gnss.column("lat_deg").to_numpy(), s.gnss.column("lon_deg").to_numpy())
    err = np.hypot(e - tr.gnss_e, n - tr.gnss_n)
    rms = float(np.sqrt(np.mean(err**2)))
    assert 2.0 < rms < 3.6  # 2 m per axis white + 0.3 m slow, HDOP-scaled ±15 %
    t = seconds(s, s.gnss)
    assert not np.any((t >= 60.0) & (t < 70.0))
    assert np.any((t >= 59.0) & (t < 60.0)) and np.any((t >= 70.0) & (t < 71.0))


def test_truth_json_is_json_and_describes_corners_and_jumps() -> None:
    s = session(laps=2, seed=1)
    doc = orjson.loads(orjson.dumps(s.truth.truth_json()))
    assert doc["lap_count"] == 2 and len(doc["laps"]) == 2
    assert {c["direction"] for c in doc["corners"]} == {"left", "right"}
    for c in doc["corners"]:
        assert c["start_s"] < c["apex_s"] < c["end_s"]
        assert 18.0 <= c["radius_m"] <= 110.0
    assert doc["jumps"] and all(j["landing_s"] > j["takeoff_s"] for j in doc["jumps"])


def test_rejects_impossible_requests() -> None:
    with pytest.raises(ValueError):
        synthesize(laps=0)
    with pytest.raises(ValueError):
        synthesize(laps=2, pit_lap=3)
    with pytest.raises(ValueError):
        synthesize(laps=2, closed=False, pit_lap=1)
