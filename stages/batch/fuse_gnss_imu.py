"""Job ``fuse_gnss_imu``: GNSS + IMU fusion into a fused pose at the IMU rate.

Theory of operation
-------------------
Work in a local east/north plane (:class:`~stages.batch.geo.LocalFrame`), both axes alike.

1. **Calibration.** While the vehicle stands still (GNSS speed < 0.3 m/s for ≥ 1 s of IMU
   samples) the mean ``ax``/``ay``/``gz`` are the accelerometer and gyro biases.
2. **Heading.** Integrate the yaw rate ``gz`` (minus bias) into a relative heading. Its offset
   to true heading (initial heading + residual gyro drift) is the circular mean, over a sliding
   window, of GNSS course (or track direction from fixes) minus integrated heading while moving.
3. **Dead reckoning.** Rotate body ``ax``/``ay`` into east/north and integrate twice from zero
   (piecewise-linear acceleration between samples, so it is exact for any instant): ``Vc(t)``,
   ``Pc(t)``. True position is ``p(t) = Pc(t) + y(t)`` where ``y`` would be *linear in time* with
   a perfect IMU; IMU errors make ``y`` an integrated white-noise process instead.
4. **Kalman filter + RTS smoother on y.** A constant-velocity model on ``y`` (state ``[y, ẏ]``
   per axis, process noise PSD ``accel_psd`` = how wrong the IMU acceleration may be) with
   measurements ``y_k = z_k − Pc(t_k)`` at each GNSS fix and, where the receiver reports speed
   and course (Doppler), ``ẏ_k = v_k − Vc(t_k)`` (a standing receiver reads zero velocity). The
   model has no inputs left, so the loop runs once per *fix* (not per IMU sample) with a
   handful of scalar operations, and the covariance is shared by east and north. Fixes whose
   NIS exceeds a gate are rejected (at most 5 in a row, then the filter re-locks). Position σ
   is estimated from the data - second differences of ``y`` are pure GNSS noise - and scaled
   by HDOP; velocity σ likewise from fix-to-fix differences of ``ẏ`` measurements.
5. **Output at IMU rate.** Between fixes the smoothed ``y`` is interpolated with a cubic Hermite
   (the conditional mean of an integrated random walk between two known states) and ``Pc`` is
   added back, so the fused track keeps every IMU detail. Position σ between fixes adds the
   bridge variance ``q τ³(Δ−τ)³/(3Δ³)``; confidence = 1 / (1 + (σ_h / 2 m)²).

Datasets read: ``imu``, ``gnss``. Produced: ``fused`` (IMU rate), ``fusion_residuals`` (per fix).
Skipped (summary ``skipped: true``) with ``reason`` ``NO_IMU_STREAM``, ``INSUFFICIENT_GNSS`` or
``NO_TIME_OVERLAP``; ``degraded: true`` with ``degraded_reasons`` when GNSS quality is poor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from schemas.run_config import FusionConfig
from stages.batch.contract import StageInput, StageOutput, run_config
from stages.batch.geo import (
    FloatArray,
    GnssFixes,
    ImuSeries,
    LocalFrame,
    course_deg_to_heading,
    heading_to_course_deg,
    micros_to_ts,
    wrap_angle,
)

FUSED = "fused"
RESIDUALS = "fusion_residuals"

NO_IMU_STREAM = "NO_IMU_STREAM"
INSUFFICIENT_GNSS = "INSUFFICIENT_GNSS"
NO_TIME_OVERLAP = "NO_TIME_OVERLAP"

# The filter loops ask the engine whether to stop every 1024 fixes (a bit mask: the check
# costs nothing next to a filter step).
_CHECK_MASK = 1023


def _velocity_measurements(
    fixes: GnssFixes, vc_e: FloatArray, vc_n: FloatArray
) -> tuple[FloatArray, FloatArray, float]:
    """GNSS velocity minus dead-reckoned velocity at each fix (NaN where unusable) and its
    per-axis σ estimated from fix-to-fix differences (white noise: spread √2·σ)."""
    speed = fixes.speed
    heading = course_deg_to_heading(fixes.course)
    ve, vn = speed * np.cos(heading), speed * np.sin(heading)
    still = speed < 0.3  # a standing receiver: zero velocity whatever the course says
    ve, vn = np.where(still, 0.0, ve), np.where(still, 0.0, vn)
    usable = still | ((speed >= 2.0) & np.isfinite(heading))
    we = np.where(usable, ve - vc_e, np.nan)
    wn = np.where(usable, vn - vc_n, np.nan)
    both = usable[1:] & usable[:-1]
    if both.sum() < 5:
        return we, wn, float("nan")
    diffs = np.concatenate([np.diff(we)[both], np.diff(wn)[both]])
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return we, wn, max(1.4826 * mad / np.sqrt(2.0), 0.05)


def run(inp: StageInput) -> StageOutput:
    """Fuse the ``gnss`` and ``imu`` datasets (see the module docstring)."""
    params = run_config(inp.config).fusion
    imu_tab, gnss_tab = inp.datasets.get("imu"), inp.datasets.get("gnss")
    if imu_tab is None or imu_tab.num_rows < 2:
        return _skipped(NO_IMU_STREAM)
    if gnss_tab is None:
        return _skipped(INSUFFICIENT_GNSS)
    fixes = GnssFixes.from_table(gnss_tab)
    if fixes.t.size < params.min_fixes:
        return _skipped(INSUFFICIENT_GNSS, fixes=int(fixes.t.size))
    imu = ImuSeries.from_table(imu_tab, fixes.t0_us)
    inside = (fixes.t >= imu.t[0]) & (fixes.t <= imu.t[-1])
    if int(inside.sum()) < params.min_fixes:
        return _skipped(NO_TIME_OVERLAP, fixes=int(fixes.t.size))
    return _fuse(fixes.subset(inside), imu, params, inp.checkpoint)


def _skipped(reason: str, **extra: Any) -> StageOutput:
    return StageOutput(summary={"skipped": True, "reason": reason, **extra})


def _fuse(
    fixes: GnssFixes, imu: ImuSeries, p: FusionConfig, checkpoint: Callable[[], None]
) -> StageOutput:
    frame = LocalFrame.around(fixes.lat, fixes.lon)
    ze, zn = frame.to_en(fixes.lat, fixes.lon)
    speed_fix = fixes.ground_speed(ze, zn)
    bias, calibrated = _calibrate(imu, fixes.t, speed_fix)
    psi, heading_src = _heading(imu, bias[2], fixes, ze, zn, speed_fix, p)
    ax, ay = imu.ax - bias[0], imu.ay - bias[1]
    ae, an = ax * np.cos(psi) - ay * np.sin(psi), ax * np.sin(psi) + ay * np.cos(psi)
    dr_e, dr_n = _DeadReckoning.build(imu.t, ae), _DeadReckoning.build(imu.t, an)
    ye, yn = ze - dr_e.position(fixes.t), zn - dr_n.position(fixes.t)
    sigma_est = _estimate_sigma(fixes.t, ye, yn, fixes.hdop)
    sigma0 = p.gnss_sigma_m if p.gnss_sigma_m is not None else sigma_est
    r = (sigma0 * fixes.hdop / float(np.median(fixes.hdop))) ** 2
    we, wn, sigma_v = _velocity_measurements(fixes, dr_e.velocity(fixes.t), dr_n.velocity(fixes.t))
    if p.gnss_velocity_sigma_mps is not None:
        sigma_v = p.gnss_velocity_sigma_mps
    if not p.use_gnss_velocity or not np.isfinite(sigma_v):
        we, wn = np.full_like(we, np.nan), np.full_like(wn, np.nan)
    checkpoint()
    kf = _smooth(
        fixes.t, ye, yn, r, we, wn, sigma_v**2 if np.isfinite(sigma_v) else 1.0, p, checkpoint
    )
    checkpoint()
    at = _Hermite.at(fixes.t, imu.t)
    ys_e, ws_e, var = _interpolate(kf, fixes.t, imu.t, axis=0, q=p.accel_psd, at=at)
    ys_n, ws_n, _ = _interpolate(kf, fixes.t, imu.t, axis=1, q=p.accel_psd, at=at, variance=False)
    assert var is not None
    keep = (imu.t >= fixes.t[0] - 1.0) & (imu.t <= fixes.t[-1] + 1.0)
    east, north = ys_e + dr_e.knot_p, ys_n + dr_n.knot_p
    ve, vn = ws_e + dr_e.knot_v, ws_n + dr_n.knot_v
    pos_std = np.sqrt(2.0 * var)
    lat, lon = frame.to_latlon(east[keep], north[keep])
    fused = pa.table(
        {
            "ts": micros_to_ts(imu.ts_us[keep]),
            "lat_deg": lat,
            "lon_deg": lon,
            "east_m": east[keep],
            "north_m": north[keep],
            "ve_mps": ve[keep],
            "vn_mps": vn[keep],
            "speed_mps": np.hypot(ve[keep], vn[keep]),
            "heading_deg": heading_to_course_deg(psi[keep]),
            "yaw_rate_rps": imu.gz[keep] - bias[2],
            "pos_std_m": pos_std[keep],
            "confidence": 1.0 / (1.0 + (pos_std[keep] / p.confidence_scale_m) ** 2),
        }
    )
    post_e = ze - (kf.xs[:, 0] + dr_e.position(fixes.t))
    post_n = zn - (kf.xs[:, 2] + dr_n.position(fixes.t))
    residuals = pa.table(
        {
            "ts": micros_to_ts(fixes.ts_us),
            "innov_e_m": kf.innov[:, 0],
            "innov_n_m": kf.innov[:, 1],
            "innov_std_m": np.sqrt(kf.s),
            "nis": kf.nis,
            "accepted": kf.accepted,
            "resid_e_m": post_e,
            "resid_n_m": post_n,
        }
    )
    reasons = _degraded_reasons(fixes, sigma0, p)
    summary = {
        "skipped": False,
        "degraded": bool(reasons),
        "degraded_reasons": reasons,
        "frame": {"lat0_deg": frame.lat0_deg, "lon0_deg": frame.lon0_deg},
        "imu_samples_fused": int(keep.sum()),
        "gnss_fixes_used": int(kf.accepted.sum()),
        "gnss_fixes_rejected": int((~kf.accepted).sum()),
        "gnss_sigma_m": float(sigma0),
        "gnss_sigma_estimated_m": float(sigma_est),
        "gnss_velocity_used": int(np.isfinite(we).sum()),
        "gnss_velocity_sigma_mps": float(sigma_v) if np.isfinite(sigma_v) else None,
        "accel_psd": p.accel_psd,
        "calibrated": calibrated,
        "accel_bias_mps2": [float(bias[0]), float(bias[1])],
        "gyro_bias_rps": float(bias[2]),
        "heading_source": heading_src,
        "pos_std_m_p50": float(np.median(pos_std[keep])) if keep.any() else None,
        "post_fit_rms_m": float(np.sqrt(np.mean(post_e**2 + post_n**2))),
    }
    return StageOutput(datasets={FUSED: fused, RESIDUALS: residuals}, summary=summary)


def _calibrate(imu: ImuSeries, t_fix: FloatArray, speed_fix: FloatArray) -> tuple[FloatArray, bool]:
    """Biases (ax, ay, gz) from stationary stretches, or zeros when the vehicle never stops."""
    still = np.interp(imu.t, t_fix, (speed_fix < 0.3).astype(np.float64)) > 0.999
    duration = float(np.sum(np.diff(imu.t)[still[:-1]])) if imu.t.size > 1 else 0.0
    if duration < 1.0:
        return np.zeros(3), False
    return np.array([imu.ax[still].mean(), imu.ay[still].mean(), imu.gz[still].mean()]), True


def _heading(
    imu: ImuSeries,
    gyro_bias: float,
    fixes: GnssFixes,
    ze: FloatArray,
    zn: FloatArray,
    speed: FloatArray,
    p: FusionConfig,
) -> tuple[FloatArray, str]:
    """Absolute heading (rad, CCW from east) at IMU samples: integrated gyro + GNSS offset."""
    rate = imu.gz - gyro_bias
    rel = np.concatenate(([0.0], np.cumsum(0.5 * (rate[1:] + rate[:-1]) * np.diff(imu.t))))
    ref, source = fixes.reference_heading(ze, zn)
    ok = np.isfinite(ref) & (speed >= p.heading_min_speed_mps)
    if not ok.any():
        return rel, "none"
    t_ok = fixes.t[ok]
    diff = wrap_angle(ref[ok] - np.interp(t_ok, imu.t, rel))
    cs = np.concatenate(([0.0], np.cumsum(np.cos(diff))))
    sn = np.concatenate(([0.0], np.cumsum(np.sin(diff))))
    lo = np.searchsorted(t_ok, t_ok - p.heading_window_s)
    hi = np.searchsorted(t_ok, t_ok + p.heading_window_s, side="right")
    offset = np.unwrap(np.arctan2(sn[hi] - sn[lo], cs[hi] - cs[lo]))
    return rel + np.interp(imu.t, t_ok, offset), source


@dataclass(frozen=True, kw_only=True)
class _DeadReckoning:
    """Velocity and position integrated from zero at the IMU knots (one axis)."""

    t: FloatArray
    acc: FloatArray
    knot_v: FloatArray
    knot_p: FloatArray

    @classmethod
    def build(cls, t: FloatArray, acc: FloatArray) -> _DeadReckoning:
        h = np.diff(t)
        dv = 0.5 * (acc[1:] + acc[:-1]) * h
        v = np.concatenate(([0.0], np.cumsum(dv)))
        dp = v[:-1] * h + (acc[:-1] / 3.0 + acc[1:] / 6.0) * h * h
        return cls(t=t, acc=acc, knot_v=v, knot_p=np.concatenate(([0.0], np.cumsum(dp))))

    def velocity(self, tq: FloatArray) -> FloatArray:
        """Dead-reckoned velocity at arbitrary times inside the IMU span."""
        i = np.clip(np.searchsorted(self.t, tq, side="right") - 1, 0, self.t.size - 2)
        h = self.t[i + 1] - self.t[i]
        tau = np.clip(tq - self.t[i], 0.0, h)
        slope = (self.acc[i + 1] - self.acc[i]) / h
        return np.asarray(self.knot_v[i] + self.acc[i] * tau + slope * tau**2 / 2)

    def position(self, tq: FloatArray) -> FloatArray:
        """Dead-reckoned position at arbitrary times inside the IMU span (exact, linear acc)."""
        i = np.clip(np.searchsorted(self.t, tq, side="right") - 1, 0, self.t.size - 2)
        h = self.t[i + 1] - self.t[i]
        tau = np.clip(tq - self.t[i], 0.0, h)
        slope = (self.acc[i + 1] - self.acc[i]) / h
        return np.asarray(
            self.knot_p[i] + self.knot_v[i] * tau + self.acc[i] * tau**2 / 2 + slope * tau**3 / 6
        )


def _estimate_sigma(t: FloatArray, ye: FloatArray, yn: FloatArray, hdop: FloatArray) -> float:
    """Per-axis GNSS σ at median HDOP from second differences of y (pure noise there)."""
    if t.size < 5:
        return 3.0
    h1, h2 = np.diff(t)[:-1], np.diff(t)[1:]
    # The divided second difference annihilates any linear trend; dividing by the weights'
    # norm leaves unit gain on white noise, so its spread is σ (HDOP-normalised).
    norm = np.sqrt(h2**2 + (h1 + h2) ** 2 + h1**2) * hdop[1:-1] / np.median(hdop)
    w = np.concatenate([(h2 * y[:-2] - (h1 + h2) * y[1:-1] + h1 * y[2:]) / norm for y in (ye, yn)])
    mad = float(np.median(np.abs(w - np.median(w))))
    return max(1.4826 * mad, 0.05)


@dataclass(frozen=True, kw_only=True)
class _Smoothed:
    xs: FloatArray  # (n, 4): y_e, w_e, y_n, w_n smoothed
    ps: FloatArray  # (n, 3): P00, P01, P11 smoothed (shared by both axes)
    innov: FloatArray  # (n, 2)
    s: FloatArray
    nis: FloatArray
    accepted: npt.NDArray[np.bool_]


def warm_up() -> None:
    """Load the compiled loops now rather than in the first fusion: about 0.5 s from numba's
    cache, 2 s compiling (``rts_kernels``). A worker's compute processes call it when the worker
    starts; a process that only imports the stages (every test's pool) does not pay it."""
    from stages.batch import rts_kernels  # noqa: F401  # imported for its side effect


def _smooth(
    t: FloatArray,
    ye: FloatArray,
    yn: FloatArray,
    r: FloatArray,
    we: FloatArray,
    wn: FloatArray,
    rv: float,
    p: FusionConfig,
    checkpoint: Callable[[], None],
) -> _Smoothed:
    """Forward Kalman filter and Rauch-Tung-Striebel smoother on [y, ẏ] per axis: position
    measurements ``ye``/``yn`` (variance ``r``), then - as a second, independent scalar update
    - velocity measurements ``we``/``wn`` (variance ``rv``; NaN = none at that fix).

    Written for speed (fusion's longest step: 36,000 fixes in a 60-minute session). Only what
    depends on the previous step runs step by step: the filter's update (its gating makes each
    step depend on the last) and the smoother's recursion, compiled (``rts_kernels``). What does
    not - the prediction terms of each interval, the predicted states and covariances the
    smoother compares against, its gains (covariances only) - is computed for all steps at once
    with numpy. Every value comes from the same IEEE operations in the same order as the plain
    per-step form (numpy's elementwise ``+ - * /`` round exactly as Python's float operations,
    numba compiles without fast-math; ``h**3`` stays Python's), so the results are identical to
    the bit (``tests/unit/stages/batch/test_fuse_gnss_imu.py`` checks them against that form).
    Measured on the 60-minute bench session: 0.50 s of CPU as plain Python loops, 0.31 s with
    the loops on float locals, 0.42 s of it (cProfile) in those loops; compiled, see
    ``rts_kernels``.
    """
    from stages.batch import rts_kernels  # see warm_up

    n = t.size
    q, gate = p.accel_psd, p.gate_nis
    el, nl, rl, wel, wnl = (np.ascontiguousarray(v, dtype=np.float64) for v in (ye, yn, r, we, wn))
    h0 = max(float(t[1] - t[0]), 1e-3)
    # x0..x3, P00, P01, P11, consecutive rejections (the filter's state between ranges)
    state = np.array([el[0], (el[1] - el[0]) / h0, nl[0], (nl[1] - nl[0]) / h0,
                      rl[0], 0.0, 100.0, 0.0])  # fmt: skip
    # The prediction P_pred = F P Fᵀ + Q over each interval h (fix k - 1 to k) needs 2h, h²,
    # q h³/3, q h²/2 and q h.
    h = np.diff(t)
    two_h, h_h, q_h2, q_h = 2 * h, h * h, q * h * h / 2, q * h
    q_h3 = np.array([q * hk**3 / 3 for hk in h.tolist()])
    xf, pf, innov = np.empty((n, 4)), np.empty((n, 3)), np.empty((n, 2))
    s_out, nis_out, acc_out = np.empty(n), np.empty(n), np.empty(n, dtype=np.bool_)
    # The compiled loops run 1,024 steps at a time; a cancellation is looked for in between.
    for lo in range(0, n, _CHECK_MASK + 1):
        checkpoint()
        rts_kernels.filter_steps(lo, min(n, lo + _CHECK_MASK + 1), el, nl, rl, wel, wnl, h,
                                 two_h, h_h, q_h3, q_h2, q_h, gate, rv, state, xf, pf, innov,
                                 s_out, nis_out, acc_out)  # fmt: skip
    # The prediction from step k to k + 1 (state and covariance), as the filter made it.
    fx0, fx1, fx2, fx3 = xf[:-1, 0], xf[:-1, 1], xf[:-1, 2], xf[:-1, 3]
    fa, fb, fd = pf[:-1, 0], pf[:-1, 1], pf[:-1, 2]
    px0, px2 = fx0 + h * fx1, fx2 + h * fx3
    qa, qb, qd = fa + two_h * fb + h_h * fd + q_h3, fb + h * fd + q_h2, fd + q_h
    # Smoother gain C = P_f Fᵀ P_pred⁻¹ with P_f Fᵀ = [[a + h b, b], [b + h d, d]].
    det = qa * qd - qb * qb
    m00, m01, m10, m11 = fa + h * fb, fb, fb + h * fd, fd
    c00, c01 = (m00 * qd - m01 * qb) / det, (m01 * qa - m00 * qb) / det
    c10, c11 = (m10 * qd - m11 * qb) / det, (m11 * qa - m10 * qb) / det
    gains = np.column_stack((c00, c01, c10, c11))
    predicted = np.column_stack((px0, fx1, px2, fx3, qa, qb, qd))
    filtered = np.column_stack((fx0, fx2, fa, fb, fd))
    xs, ps = np.empty((n, 4)), np.empty((n, 3))
    xs[-1], ps[-1] = xf[-1], pf[-1]
    back = np.concatenate((xf[-1], pf[-1]))
    hi = n - 2
    while hi >= 0:
        lo = hi & ~_CHECK_MASK
        checkpoint()
        rts_kernels.smooth_steps(hi, lo, gains, predicted, filtered, back, xs, ps)
        hi = lo - 1
    return _Smoothed(xs=xs, ps=ps, innov=innov, s=s_out, nis=nis_out, accepted=acc_out)


@dataclass(frozen=True, kw_only=True)
class _Hermite:
    """Where times ``t`` fall between the fixes, and the cubic Hermite weights there."""

    k: npt.NDArray[np.intp]
    k1: npt.NDArray[np.intp]
    dt: FloatArray
    tau: FloatArray
    s: FloatArray
    s2: FloatArray  # s**2 and s**3, computed once for both axes
    s3: FloatArray
    before: npt.NDArray[np.bool_]
    after: npt.NDArray[np.bool_]

    @classmethod
    def at(cls, t_fix: FloatArray, t: FloatArray) -> _Hermite:
        k = np.clip(np.searchsorted(t_fix, t, side="right") - 1, 0, max(t_fix.size - 2, 0))
        k1 = np.minimum(k + 1, t_fix.size - 1)
        dt = np.maximum(t_fix[k1] - t_fix[k], 1e-9)
        tau = t - t_fix[k]
        s = np.clip(tau / dt, 0.0, 1.0)
        return cls(
            k=k,
            k1=k1,
            dt=dt,
            tau=tau,
            s=s,
            s2=s**2,
            s3=s**3,
            before=t < t_fix[0],
            after=t > t_fix[-1],
        )


def _interpolate(
    kf: _Smoothed,
    t_fix: FloatArray,
    t: FloatArray,
    *,
    axis: int,
    q: float,
    at: _Hermite | None = None,
    variance: bool = True,
) -> tuple[FloatArray, FloatArray, FloatArray | None]:
    """Cubic Hermite of smoothed [y, ẏ] at times ``t``; linear extrapolation outside.

    ``at``: the :class:`_Hermite` of ``t`` (shared by both axes); ``variance=False`` skips the
    position variance (the same for both axes: the covariance is shared)."""
    y, w = kf.xs[:, 2 * axis], kf.xs[:, 2 * axis + 1]
    hm = at if at is not None else _Hermite.at(t_fix, t)
    k, k1, dt, tau, s, s2, s3 = hm.k, hm.k1, hm.dt, hm.tau, hm.s, hm.s2, hm.s3
    h00, h10 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s
    h01, h11 = -2 * s3 + 3 * s2, s3 - s2
    yi = h00 * y[k] + h10 * dt * w[k] + h01 * y[k1] + h11 * dt * w[k1]
    wi = (
        (6 * s2 - 6 * s) * y[k]
        + (3 * s2 - 4 * s + 1) * dt * w[k]
        + (-6 * s2 + 6 * s) * y[k1]
        + (3 * s2 - 2 * s) * dt * w[k1]
    ) / dt
    var = None
    if variance:
        var = (1 - s) * kf.ps[k, 0] + s * kf.ps[k1, 0] + q * (tau * (dt - tau)) ** 3 / (3 * dt**3)
    # Outside the fixes' span: extrapolate from the nearest end state.
    for m, j in ((hm.before, 0), (hm.after, t_fix.size - 1)):
        if m.any():
            ta = t[m] - t_fix[j]
            yi[m] = y[j] + w[j] * ta
            wi[m] = w[j]
            if var is not None:
                var[m] = (
                    kf.ps[j, 0] + 2 * ta * kf.ps[j, 1] + ta**2 * kf.ps[j, 2] + q * abs(ta) ** 3 / 3
                )
    return yi, wi, np.maximum(var, 0.0) if var is not None else None


def _degraded_reasons(fixes: GnssFixes, sigma: float, p: FusionConfig) -> list[str]:
    steps = np.diff(fixes.t)  # at least min_fixes - 1 of them
    span = max(float(fixes.t[-1] - fixes.t[0]), 1e-9)
    checks = {
        "HIGH_HDOP": float(np.median(fixes.hdop)) > p.hdop_degraded,
        "HIGH_GNSS_NOISE": sigma > p.sigma_degraded_m,
        "LOW_FIX_RATE": float(np.median(steps)) > p.max_fix_interval_s,
        "GNSS_GAPS": float(steps[steps > p.max_fix_interval_s].sum()) / span
        > p.gap_fraction_degraded,
    }
    return [code for code, bad in checks.items() if bad]
