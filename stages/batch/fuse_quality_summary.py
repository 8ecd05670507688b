"""Job ``fuse_quality_summary``: health of the GNSS/IMU fusion as flags and statistics.

Reads ``fused`` and ``fusion_residuals`` (from ``fuse_gnss_imu``), ``gnss`` for gap analysis
and the ``fuse_gnss_imu`` summary. Produces the ``fusion_health`` dataset (one row per
``window_s`` window of the session) and a summary with:

- ``gnss_gaps``: count / longest / total seconds of intervals between fixes longer than
  ``gap_s`` (default 1 s), and the fraction of the session they cover;
- ``innovation``: RMS innovation (m), mean NIS (a consistent filter gives ≈ 2 for the 2-D
  position), fraction of fixes above the 99 % χ²₂ bound (≈ 1 % when consistent), rejected fixes;
- ``divergence``: windows (of at least 10 fixes) where more than ``divergence_fraction``
  (default 30 %) of all fixes, rejected ones included, fall outside the 99 % χ²₂ bound - the
  filter and GNSS disagree for a sustained period, not just at one glitch;
- ``confidence``: p5/p50/p95 of the per-sample confidence and of ``pos_std_m``;
- ``flags`` (stable codes) and ``healthy`` (no flag other than ``GNSS_GAPS``).

When fusion was skipped the summary says ``skipped: true`` with the fusion's ``reason``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stages.batch.contract import StageInput, StageOutput, run_config
from stages.batch.geo import (
    FloatArray,
    GnssFixes,
    IntArray,
    column_f64,
    micros_to_ts,
    ts_micros,
)

HEALTH = "fusion_health"
_CHI2_2DOF_99 = 9.2103

GNSS_GAPS = "GNSS_GAPS"
HIGH_INNOVATION = "HIGH_INNOVATION"
DIVERGENCE = "DIVERGENCE"
LOW_CONFIDENCE = "LOW_CONFIDENCE"
REJECTED_FIXES = "REJECTED_FIXES"
DEGRADED_INPUT = "DEGRADED_INPUT"


def run(inp: StageInput) -> StageOutput:
    """Summarise fusion health (see the module docstring)."""
    fuse_summary = inp.summaries.get("fuse_gnss_imu", {})
    fused, resid = inp.datasets.get("fused"), inp.datasets.get("fusion_residuals")
    if fuse_summary.get("skipped") or fused is None or resid is None:
        reason = fuse_summary.get("reason", "FUSION_NOT_RUN")
        return StageOutput(summary={"skipped": True, "reason": reason, "healthy": False})
    cfg = run_config(inp.config).fusion_quality
    gap_s, window_s, div_frac = cfg.gap_s, cfg.window_s, cfg.divergence_fraction

    ts_r = ts_micros(resid)
    nis = column_f64(resid, "nis")
    accepted = np.asarray(resid.column("accepted").to_numpy(zero_copy_only=False), dtype=bool)
    innov = np.hypot(column_f64(resid, "innov_e_m"), column_f64(resid, "innov_n_m"))
    ts_f = ts_micros(fused)
    conf, std = column_f64(fused, "confidence"), column_f64(fused, "pos_std_m")
    gnss = inp.datasets.get("gnss")
    fix_ts = GnssFixes.from_table(gnss).ts_us if gnss is not None else ts_r

    gaps = _gaps(fix_ts, gap_s)
    t0, t1 = int(min(ts_f[0], ts_r[0])), int(max(ts_f[-1], ts_r[-1]))
    span = max((t1 - t0) / 1e6, 1e-9)
    health = _windows(t0, t1, window_s, ts_r, nis, accepted, ts_f, conf, fix_ts, gap_s)
    frac_w = np.nan_to_num(health.column("outlier_fraction").to_numpy(zero_copy_only=False))
    fixes_w = health.column("fixes").to_numpy()
    diverged = int(np.sum((frac_w > div_frac) & (fixes_w >= 10)))
    acc_nis = nis[accepted]
    outlier_frac = float(np.mean(acc_nis > _CHI2_2DOF_99)) if acc_nis.size else 0.0
    rejected = int((~accepted).sum())

    flags = []
    if gaps["count"]:
        flags.append(GNSS_GAPS)
    if outlier_frac > 0.05:
        flags.append(HIGH_INNOVATION)
    if diverged:
        flags.append(DIVERGENCE)
    if conf.size and float(np.median(conf)) < 0.5:
        flags.append(LOW_CONFIDENCE)
    if rejected > max(1, int(0.01 * accepted.size)):
        flags.append(REJECTED_FIXES)
    if fuse_summary.get("degraded"):
        flags.append(DEGRADED_INPUT)
    summary = {
        "skipped": False,
        "healthy": all(f == GNSS_GAPS for f in flags),
        "flags": flags,
        "gnss_gaps": {**gaps, "fraction": gaps["total_s"] / span},
        "innovation": {
            "rms_m": _rms(innov[accepted]),
            "nis_mean": float(acc_nis.mean()) if acc_nis.size else None,
            "outlier_fraction": outlier_frac,
            "rejected": rejected,
            "fixes": int(accepted.size),
        },
        "divergence": {"windows": diverged, "window_s": window_s, "fraction": div_frac},
        "confidence": _percentiles(conf),
        "pos_std_m": _percentiles(std),
        "degraded_reasons": list(fuse_summary.get("degraded_reasons", [])),
    }
    return StageOutput(datasets={HEALTH: health}, summary=summary)


def _gaps(ts_us: IntArray, gap_s: float) -> dict[str, Any]:
    steps = np.diff(ts_us).astype(np.float64) / 1e6
    big = steps[steps > gap_s]
    return {"count": int(big.size), "longest_s": float(big.max()) if big.size else 0.0,
            "total_s": float(big.sum()), "threshold_s": gap_s}


def _rms(x: FloatArray) -> float | None:
    return float(np.sqrt(np.mean(x * x))) if x.size else None


def _percentiles(x: FloatArray) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if not x.size:
        return {"p5": None, "p50": None, "p95": None}
    p5, p50, p95 = np.percentile(x, [5, 50, 95])
    return {"p5": float(p5), "p50": float(p50), "p95": float(p95)}


def _windows(t0: int, t1: int, window_s: float, ts_r: IntArray, nis: FloatArray,
             accepted: npt.NDArray[np.bool_], ts_f: IntArray, conf: FloatArray,
             fix_ts: IntArray, gap_s: float) -> pa.Table:
    """Per-window statistics for a health timeline (NaN where a window has no data)."""
    w_us = int(window_s * 1e6)
    starts = np.arange(t0, t1 + 1, w_us, dtype=np.int64)
    ends = np.minimum(starts + w_us, t1 + 1)
    r_lo, r_hi = np.searchsorted(ts_r, starts), np.searchsorted(ts_r, ends)
    f_lo, f_hi = np.searchsorted(ts_f, starts), np.searchsorted(ts_f, ends)
    steps = np.diff(fix_ts).astype(np.float64) / 1e6
    gap_mid = fix_ts[:-1][steps > gap_s]
    gap_len = steps[steps > gap_s]
    g_idx = np.searchsorted(starts, gap_mid, side="right") - 1
    gap_per = np.bincount(np.clip(g_idx, 0, None), weights=gap_len,
                          minlength=starts.size).astype(np.float64)
    nis_mean, outl, cmed = [], [], []
    for a, b, c, d in zip(r_lo.tolist(), r_hi.tolist(), f_lo.tolist(), f_hi.tolist(),
                          strict=True):
        sel = nis[a:b][accepted[a:b]]
        nis_mean.append(float(sel.mean()) if sel.size else float("nan"))
        outl.append(float(np.mean(nis[a:b] > _CHI2_2DOF_99)) if b > a else float("nan"))
        cmed.append(float(np.median(conf[c:d])) if d > c else float("nan"))
    return pa.table({
        "window_start": micros_to_ts(starts),
        "window_end": micros_to_ts(ends),
        "fixes": pa.array((r_hi - r_lo).astype(np.int64)),
        "gap_s": pa.array(gap_per[: starts.size]),
        "nis_mean": pa.array(nis_mean),
        "outlier_fraction": pa.array(outl),
        "confidence_p50": pa.array(cmed),
    })
