"""fuse_gnss_imu: accuracy against synthetic truth, gating, skip and degraded modes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import fuse_gnss_imu
from stages.batch.contract import StageInput
from tests.unit.stages.batch.sessions import fused, position_rms, seconds, session


@pytest.mark.parametrize(("seed", "laps", "extra"), [
    (0, 2, {}),
    (1, 3, {}),
    (2, 2, {"gnss_hz": 5.0}),
    (3, 2, {"gnss_noise_m": 4.0}),
    (4, 2, {"imu_hz": 50.0, "gnss_gaps": ((40.0, 8.0),)}),
])
def test_fused_position_beats_raw_gnss(seed: int, laps: int, extra: dict[str, object]) -> None:
    s = session(laps=laps, seed=seed, **extra)
    out = fused(laps=laps, seed=seed, **extra)
    assert out.summary["skipped"] is False and out.summary["degraded"] is False
    raw = position_rms(s, s.gnss)
    fz = position_rms(s, out.datasets["fused"])
    assert fz <= 0.7 * raw, f"fused {fz:.2f} m vs raw {raw:.2f} m"


def test_fused_series_is_at_imu_rate_with_sane_kinematics() -> None:
    s = session(laps=2, seed=0)
    out = fused(laps=2, seed=0)
    f = out.datasets["fused"]
    assert f.num_rows >= 0.98 * s.imu.num_rows
    assert set(f.column_names) >= {"ts", "lat_deg", "lon_deg", "east_m", "north_m", "ve_mps",
                                   "vn_mps", "speed_mps", "heading_deg", "pos_std_m",
                                   "confidence"}
    t = seconds(s, f)
    assert np.all(np.diff(t) > 0)
    # Speed against the true path's speed (central differences of true positions).
    tt = s.truth.imu_t
    true_speed = np.hypot(np.gradient(s.truth.imu_e, tt), np.gradient(s.truth.imu_n, tt))
    speed_err = f.column("speed_mps").to_numpy() - np.interp(t, tt, true_speed)
    assert float(np.sqrt(np.mean(speed_err**2))) < 0.3
    # Heading is the direction of travel while moving (course convention, degrees).
    moving = np.interp(t, tt, true_speed) > 5.0
    true_course = np.degrees(np.arctan2(np.gradient(s.truth.imu_e, tt),
                                        np.gradient(s.truth.imu_n, tt)))
    diff = (f.column("heading_deg").to_numpy() - np.interp(t, tt, true_course) + 180) % 360 - 180
    assert np.percentile(np.abs(diff[moving]), 95) < 2.0
    conf = f.column("confidence").to_numpy()
    assert np.all((conf > 0) & (conf <= 1)) and np.median(conf) > 0.8
    assert out.summary["calibrated"] is True and out.summary["heading_source"] == "course"
    assert 1.5 < out.summary["gnss_sigma_estimated_m"] < 2.5  # synthetic σ is 2 m per axis


def test_uncertainty_grows_inside_a_gnss_gap() -> None:
    s = session(laps=2, seed=4, imu_hz=50.0, gnss_gaps=((40.0, 8.0),))
    f = fused(laps=2, seed=4, imu_hz=50.0, gnss_gaps=((40.0, 8.0),)).datasets["fused"]
    t, std = seconds(s, f), f.column("pos_std_m").to_numpy()
    inside = std[(t > 43.0) & (t < 45.0)]
    outside = std[(t > 80.0) & (t < 90.0)]
    assert inside.min() > 2 * outside.max()


def test_outlier_fixes_are_rejected_without_hurting_accuracy() -> None:
    s = session(laps=2, seed=1)
    lat = s.gnss.column("lat_deg").to_numpy().copy()
    bad = np.arange(200, lat.size, 250)
    lat[bad] += 60.0 / 111_000  # 60 m jumps north
    gnss = s.gnss.set_column(1, s.gnss.schema.field("lat_deg"), pa.array(lat))
    out = fuse_gnss_imu.run(StageInput(datasets={"gnss": gnss, "imu": s.imu}))
    assert out.summary["gnss_fixes_rejected"] >= bad.size
    assert position_rms(s, out.datasets["fused"]) < 0.7 * position_rms(s, s.gnss)
    res = out.datasets["fusion_residuals"]
    accepted = res.column("accepted").to_numpy(zero_copy_only=False)
    assert not accepted[bad].any()


def test_works_without_course_and_speed_columns() -> None:
    s = session(laps=2, seed=2)
    g = s.gnss
    for name in ("course_deg", "speed_mps"):
        i = g.schema.get_field_index(name)
        g = g.set_column(i, g.schema.field(name), pa.nulls(g.num_rows, pa.float64()))
    out = fuse_gnss_imu.run(StageInput(datasets={"gnss": g, "imu": s.imu}))
    assert out.summary["heading_source"] == "track"
    assert position_rms(s, out.datasets["fused"]) <= 0.7 * position_rms(s, s.gnss)


def test_skipped_without_imu_or_with_too_few_fixes() -> None:
    s = session(laps=2, seed=0)
    out = fuse_gnss_imu.run(StageInput(datasets={"gnss": s.gnss}))
    assert out.summary == {"skipped": True, "reason": "NO_IMU_STREAM"} and not out.datasets
    few = fuse_gnss_imu.run(StageInput(datasets={"gnss": s.gnss.slice(0, 5), "imu": s.imu}))
    assert few.summary["skipped"] is True and few.summary["reason"] == "INSUFFICIENT_GNSS"
    late = s.imu.slice(s.imu.num_rows - 10)  # IMU only after every fix but the last
    none = fuse_gnss_imu.run(StageInput(datasets={"gnss": s.gnss.slice(0, 100), "imu": late}))
    assert none.summary["reason"] == "NO_TIME_OVERLAP"


def test_poor_gnss_runs_in_degraded_mode() -> None:
    s = session(laps=2, seed=5, hdop=4.0, gnss_noise_m=9.0, gnss_hz=1.0)
    out = fuse_gnss_imu.run(StageInput(datasets={"gnss": s.gnss, "imu": s.imu}))
    assert out.summary["skipped"] is False and out.summary["degraded"] is True
    assert {"HIGH_HDOP", "HIGH_GNSS_NOISE"} <= set(out.summary["degraded_reasons"])
    assert out.datasets["fused"].num_rows > 0
    assert position_rms(s, out.datasets["fused"]) < position_rms(s, s.gnss)


def test_config_overrides_are_applied() -> None:
    s = session(laps=2, seed=0)
    out = fuse_gnss_imu.run(StageInput(datasets={"gnss": s.gnss, "imu": s.imu},
                                       config={"fusion": {"gnss_sigma_m": 5.0}}))
    assert out.summary["gnss_sigma_m"] == 5.0
