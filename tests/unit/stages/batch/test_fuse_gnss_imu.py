"""fuse_gnss_imu: accuracy against synthetic truth, gating, skip and degraded modes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import fuse_gnss_imu
from stages.batch.contract import StageInput
from tests.unit.stages.batch.sessions import fused, position_rms, seconds, session


@pytest.mark.parametrize(
    ("seed", "laps", "extra"),
    [
        (0, 2, {}),
        (1, 3, {}),
        (2, 2, {"gnss_hz": 5.0}),
        (3, 2, {"gnss_noise_m": 4.0}),
        (4, 2, {"imu_hz": 50.0, "gnss_gaps": ((40.0, 8.0),)}),
    ],
)
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
    assert set(f.column_names) >= {
        "ts",
        "lat_deg",
        "lon_deg",
        "east_m",
        "north_m",
        "ve_mps",
        "vn_mps",
        "speed_mps",
        "heading_deg",
        "pos_std_m",
        "confidence",
    }
    t = seconds(s, f)
    assert np.all(np.diff(t) > 0)
    # Speed against the true path's speed (central differences of true positions).
    tt = s.truth.imu_t
    true_speed = np.hypot(np.gradient(s.truth.imu_e, tt), np.gradient(s.truth.imu_n, tt))
    speed_err = f.column("speed_mps").to_numpy() - np.interp(t, tt, true_speed)
    assert float(np.sqrt(np.mean(speed_err**2))) < 0.3
    # Heading is the direction of travel while moving (course convention, degrees).
    moving = np.interp(t, tt, true_speed) > 5.0
    true_course = np.degrees(
        np.arctan2(np.gradient(s.truth.imu_e, tt), np.gradient(s.truth.imu_n, tt))
    )
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
    out = fuse_gnss_imu.run(
        StageInput(
            datasets={"gnss": s.gnss, "imu": s.imu}, config={"fusion": {"gnss_sigma_m": 5.0}}
        )
    )
    assert out.summary["gnss_sigma_m"] == 5.0


# -- the fast smoother and interpolation against their plain per-step forms ----------------
# fuse_gnss_imu._smooth and _interpolate are written for speed (float locals, the steps that
# do not depend on the previous one done with numpy); these are the forms they replaced, one
# step at a time, and the two must agree to the bit.


def _smooth_plain(
    t: Any, ye: Any, yn: Any, r: Any, we: Any, wn: Any, rv: float, p: Any
) -> dict[str, Any]:
    n = t.size
    q, gate = p.accel_psd, p.gate_nis
    tl, el, nl, rl = t.tolist(), ye.tolist(), yn.tolist(), r.tolist()
    wel, wnl = we.tolist(), wn.tolist()
    h0 = max(tl[1] - tl[0], 1e-3)
    x = [el[0], (el[1] - el[0]) / h0, nl[0], (nl[1] - nl[0]) / h0]
    a, b, d = rl[0], 0.0, 100.0
    xf, pf, xp, pp = [], [], [], []
    innov, s_out, nis_out, acc_out = [], [], [], []
    rejects = 0
    for k in range(n):
        if k:
            h = tl[k] - tl[k - 1]
            x = [x[0] + h * x[1], x[1], x[2] + h * x[3], x[3]]
            a, b, d = (
                a + 2 * h * b + h * h * d + q * h**3 / 3,
                b + h * d + q * h * h / 2,
                d + q * h,
            )
        xp.append(x)
        pp.append((a, b, d))
        ie, inn = el[k] - x[0], nl[k] - x[2]
        s = a + rl[k]
        nis = (ie * ie + inn * inn) / s
        ok = nis <= gate or rejects >= 5 or k == 0
        if ok:
            k0, k1 = a / s, b / s
            x = [x[0] + k0 * ie, x[1] + k1 * ie, x[2] + k0 * inn, x[3] + k1 * inn]
            a, b, d = (1 - k0) * a, (1 - k0) * b, d - k1 * b
            rejects = 0
        else:
            rejects += 1
        ve, vn = wel[k], wnl[k]
        if ve == ve:
            sv = d + rv
            ive, ivn = ve - x[1], vn - x[3]
            if (ive * ive + ivn * ivn) / sv <= gate:
                k0, k1 = b / sv, d / sv
                x = [x[0] + k0 * ive, x[1] + k1 * ive, x[2] + k0 * ivn, x[3] + k1 * ivn]
                a, b, d = a - k0 * b, b - k0 * d, d - k1 * d
        xf.append(x)
        pf.append((a, b, d))
        innov.append((ie, inn))
        s_out.append(s)
        nis_out.append(nis)
        acc_out.append(ok)
    xs, ps = list(xf), list(pf)
    for k in range(n - 2, -1, -1):
        h = tl[k + 1] - tl[k]
        fa, fb, fd = pf[k]
        qa, qb, qd = pp[k + 1]
        det = qa * qd - qb * qb
        m00, m01, m10, m11 = fa + h * fb, fb, fb + h * fd, fd
        c00 = (m00 * qd - m01 * qb) / det
        c01 = (m01 * qa - m00 * qb) / det
        c10 = (m10 * qd - m11 * qb) / det
        c11 = (m11 * qa - m10 * qb) / det
        sx, px_ = xs[k + 1], xp[k + 1]
        de0, de1 = sx[0] - px_[0], sx[1] - px_[1]
        dn0, dn1 = sx[2] - px_[2], sx[3] - px_[3]
        fx = xf[k]
        xs[k] = [
            fx[0] + c00 * de0 + c01 * de1,
            fx[1] + c10 * de0 + c11 * de1,
            fx[2] + c00 * dn0 + c01 * dn1,
            fx[3] + c10 * dn0 + c11 * dn1,
        ]
        sa, sb, sd = ps[k + 1]
        ea, eb, ed = sa - qa, sb - qb, sd - qd
        t00, t01 = c00 * ea + c01 * eb, c00 * eb + c01 * ed
        t10, t11 = c10 * ea + c11 * eb, c10 * eb + c11 * ed
        ps[k] = (fa + t00 * c00 + t01 * c01, fb + t00 * c10 + t01 * c11, fd + t10 * c10 + t11 * c11)
    return {
        "xs": np.array(xs),
        "ps": np.array(ps),
        "innov": np.array(innov),
        "s": np.array(s_out),
        "nis": np.array(nis_out),
        "accepted": np.array(acc_out),
    }


def _interpolate_plain(kf: Any, t_fix: Any, t: Any, axis: int, q: float) -> tuple[Any, Any, Any]:
    y, w = kf.xs[:, 2 * axis], kf.xs[:, 2 * axis + 1]
    k = np.clip(np.searchsorted(t_fix, t, side="right") - 1, 0, max(t_fix.size - 2, 0))
    k1 = np.minimum(k + 1, t_fix.size - 1)
    dt = np.maximum(t_fix[k1] - t_fix[k], 1e-9)
    tau = t - t_fix[k]
    s = np.clip(tau / dt, 0.0, 1.0)
    h00, h10 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s
    h01, h11 = -2 * s**3 + 3 * s**2, s**3 - s**2
    yi = h00 * y[k] + h10 * dt * w[k] + h01 * y[k1] + h11 * dt * w[k1]
    wi = (
        (6 * s**2 - 6 * s) * y[k]
        + (3 * s**2 - 4 * s + 1) * dt * w[k]
        + (-6 * s**2 + 6 * s) * y[k1]
        + (3 * s**2 - 2 * s) * dt * w[k1]
    ) / dt
    var = (1 - s) * kf.ps[k, 0] + s * kf.ps[k1, 0] + q * (tau * (dt - tau)) ** 3 / (3 * dt**3)
    before, after = t < t_fix[0], t > t_fix[-1]
    for m, j in ((before, 0), (after, t_fix.size - 1)):
        if m.any():
            ta = t[m] - t_fix[j]
            yi[m] = y[j] + w[j] * ta
            wi[m] = w[j]
            var[m] = kf.ps[j, 0] + 2 * ta * kf.ps[j, 1] + ta**2 * kf.ps[j, 2] + q * abs(ta) ** 3 / 3
    return yi, wi, np.maximum(var, 0.0)


def _same_bits(a: Any, b: Any) -> bool:
    return bool(a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes())


@pytest.mark.parametrize("case", ["plain", "outliers", "gaps", "no_velocity"])
def test_the_fast_smoother_and_interpolation_match_the_plain_forms_to_the_bit(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra: dict[str, object] = {"gaps": {"imu_hz": 50.0, "gnss_gaps": ((40.0, 8.0),)}}.get(case, {})
    s = session(laps=2, seed=1, **extra)
    gnss = s.gnss
    if case == "outliers":  # rejected fixes: the gating path and its re-lock after five
        lat = gnss.column("lat_deg").to_numpy().copy()
        lat[np.arange(200, lat.size, 250)] += 60.0 / 111_000
        lat[600:608] += 80.0 / 111_000
        gnss = gnss.set_column(1, gnss.schema.field("lat_deg"), pa.array(lat))
    if case == "no_velocity":
        for name in ("course_deg", "speed_mps"):
            i = gnss.schema.get_field_index(name)
            gnss = gnss.set_column(
                i, gnss.schema.field(name), pa.nulls(gnss.num_rows, pa.float64())
            )
    calls: list[tuple[tuple[Any, ...], Any]] = []
    fast = fuse_gnss_imu._smooth

    def spy(*args: Any) -> Any:
        out = fast(*args)
        calls.append((args, out))
        return out

    monkeypatch.setattr(fuse_gnss_imu, "_smooth", spy)
    out = fuse_gnss_imu.run(StageInput(datasets={"gnss": gnss, "imu": s.imu}))
    assert out.summary["skipped"] is False and len(calls) == 1
    (t, ye, yn, r, we, wn, rv, p, _checkpoint), kf = calls[0]
    plain = _smooth_plain(t, ye, yn, r, we, wn, rv, p)
    for name, expected in plain.items():
        assert _same_bits(getattr(kf, name), expected), name
    if case == "outliers":
        assert not plain["accepted"].all()
    t_imu = np.linspace(float(t[0]) - 2.0, float(t[-1]) + 2.0, 5001)  # both ends outside too
    at = fuse_gnss_imu._Hermite.at(t, t_imu)
    for axis in (0, 1):
        yi, wi, var = fuse_gnss_imu._interpolate(kf, t, t_imu, axis=axis, q=p.accel_psd, at=at)
        ref = _interpolate_plain(kf, t, t_imu, axis, p.accel_psd)
        assert var is not None
        assert _same_bits(yi, ref[0]) and _same_bits(wi, ref[1]) and _same_bits(var, ref[2])
