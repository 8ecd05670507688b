"""Job ``detect_segments``: corners, straights and jump candidates.

Theory of operation
-------------------
**Corners** come from path curvature ``κ = yaw rate / speed``. The yaw rate is the fused
``yaw_rate_rps`` (bias-corrected gyro) when fusion ran, else the IMU ``gz`` with GNSS speed,
else the rate of change of GNSS course (or of the fixes' track direction). It is smoothed over
``smooth_s``; speed is floored at 2 m/s so a crawl cannot fake a hairpin. A corner is a stretch
of one sign where ``|κ| > kappa_off`` that somewhere exceeds ``kappa_on`` (hysteresis),
turns by at least ``min_turn_deg`` and moves faster than ``min_speed_mps``; same-direction
stretches less than ``merge_gap_s`` apart are one corner. The apex is the point of largest
``|κ|``. Between consecutive corners lies a **straight** (if at least ``min_straight_s``).

**Jumps** need the IMU: in free fall an accelerometer reads ≈ 0 on every axis. A jump
candidate is a stretch of at least ``min_air_s`` where the (50 ms smoothed) specific-force
norm stays below ``free_fall_g`` followed, within ``landing_window_s``, by a landing spike
above ``landing_g``. Without an IMU no jump is reported (``jumps_reason: NO_IMU_STREAM``).

Reads ``fused`` / ``imu`` / ``gnss`` and, when present, ``laps`` (to label each segment with
its lap). Produces dataset ``segments`` (see :func:`segments_table`); tuning under
``config["segments"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from scipy.ndimage import uniform_filter1d

from schemas.run_config import SegmentsConfig
from stages.batch.contract import StageInput, StageOutput, run_config
from stages.batch.geo import (
    FloatArray,
    GnssFixes,
    ImuSeries,
    IntArray,
    LocalFrame,
    column_f64,
    micros_to_ts,
    ts_micros,
)

SEGMENTS = "segments"
G = 9.80665


@dataclass(frozen=True, kw_only=True)
class _Turning:
    """Yaw rate and speed on one time base."""

    source: str
    ts_us: IntArray
    t: FloatArray
    yaw_rate: FloatArray
    speed: FloatArray


def run(inp: StageInput) -> StageOutput:
    """Detect segments (see the module docstring)."""
    p = run_config(inp.config).segments
    turning = _turning(inp.datasets)
    imu_tab = inp.datasets.get("imu")
    rows: list[dict[str, Any]] = []
    if turning is not None:
        rows += _corners_and_straights(turning, p)
    jumps_reason = None
    if imu_tab is not None and imu_tab.num_rows > 1:
        rows += _jumps(ImuSeries.from_table(imu_tab, int(ts_micros(imu_tab)[0])), p)
    else:
        jumps_reason = "NO_IMU_STREAM"
    rows.sort(key=lambda r: (r["start_us"], r["kind"]))
    _label_laps(rows, inp.datasets.get("laps"))
    counts = {k: sum(r["kind"] == k for r in rows) for k in ("corner", "straight", "jump")}
    return StageOutput(datasets={SEGMENTS: segments_table(rows)}, summary={
        "segments_available": turning is not None,
        "reason": None if turning is not None else "NO_MOTION_DATA",
        "corner_source": turning.source if turning is not None else None,
        "corner_count": counts["corner"], "straight_count": counts["straight"],
        "jump_count": counts["jump"], "jumps_available": jumps_reason is None,
        "jumps_reason": jumps_reason,
    })


def _turning(ds: Mapping[str, pa.Table]) -> _Turning | None:
    # Datasets may load lazily: touch only what the chosen source needs.
    fused = ds.get("fused")
    if fused is not None and fused.num_rows > 1:
        ts = ts_micros(fused)
        return _Turning(source="fused", ts_us=ts, t=(ts - ts[0]) / 1e6,
                        yaw_rate=column_f64(fused, "yaw_rate_rps"),
                        speed=column_f64(fused, "speed_mps"))
    gnss = ds.get("gnss")
    fixes = GnssFixes.from_table(gnss) if gnss is not None else None
    if fixes is None or fixes.t.size < 3:
        return None
    e, n = LocalFrame.around(fixes.lat, fixes.lon).to_en(fixes.lat, fixes.lon)
    speed = fixes.ground_speed(e, n)
    imu = ds.get("imu")
    if imu is not None and imu.num_rows > 1:
        series = ImuSeries.from_table(imu, fixes.t0_us)
        return _Turning(source="imu", ts_us=series.ts_us, t=series.t, yaw_rate=series.gz,
                        speed=np.interp(series.t, fixes.t, speed))
    heading, _ = fixes.reference_heading(e, n)
    ok = np.isfinite(heading)
    if ok.sum() < 3:
        return None
    unwrapped = np.unwrap(np.interp(fixes.t, fixes.t[ok], np.unwrap(heading[ok])))
    return _Turning(source="gnss", ts_us=fixes.ts_us, t=fixes.t,
                    yaw_rate=np.gradient(unwrapped, fixes.t), speed=speed)


def _smooth(x: FloatArray, t: FloatArray, seconds: float) -> FloatArray:
    rate = 1.0 / max(float(np.median(np.diff(t))), 1e-4)
    return np.asarray(uniform_filter1d(x, max(1, round(seconds * rate)), mode="nearest"))


def _corners_and_straights(tr: _Turning, p: SegmentsConfig) -> list[dict[str, Any]]:
    rate = _smooth(np.nan_to_num(tr.yaw_rate), tr.t, p.smooth_s)
    speed = np.nan_to_num(tr.speed)
    kappa = rate / np.maximum(speed, 2.0)
    moving = speed >= p.min_speed_mps
    spans: list[list[int]] = []
    for sign in (1.0, -1.0):
        active = moving & (sign * kappa > p.kappa_off)
        for a, b in _stretches(active):
            if np.max(sign * kappa[a:b + 1]) > p.kappa_on:
                spans.append([a, b, int(sign)])
    spans.sort()
    merged: list[list[int]] = []
    for a, b, sgn in spans:
        if merged and merged[-1][2] == sgn and tr.t[a] - tr.t[merged[-1][1]] < p.merge_gap_s:
            merged[-1][1] = b
        else:
            merged.append([a, b, sgn])
    rows: list[dict[str, Any]] = []
    for a, b, sgn in merged:
        turn = float(np.degrees(np.trapezoid(rate[a:b + 1], tr.t[a:b + 1])))
        if abs(turn) < p.min_turn_deg:
            continue
        apex = a + int(np.argmax(sgn * kappa[a:b + 1]))
        rows.append({"kind": "corner", "start_us": int(tr.ts_us[a]), "end_us": int(tr.ts_us[b]),
                     "apex_us": int(tr.ts_us[apex]), "direction": "left" if sgn > 0 else "right",
                     "heading_change_deg": turn, "max_abs_curvature": float(abs(kappa[apex])),
                     "airtime_s": None, "landing_peak_mps2": None})
    rows += _straights(rows, tr, p)
    return rows


def _straights(corners: list[dict[str, Any]], tr: _Turning,
               p: SegmentsConfig) -> list[dict[str, Any]]:
    moving = np.flatnonzero(np.nan_to_num(tr.speed) >= p.min_speed_mps)
    if moving.size == 0:
        return []
    bounds = [int(tr.ts_us[moving[0]])]
    for c in corners:
        bounds += [c["start_us"], c["end_us"]]
    bounds.append(int(tr.ts_us[moving[-1]]))
    out = []
    for a, b in zip(bounds[0::2], bounds[1::2], strict=True):
        if (b - a) / 1e6 >= p.min_straight_s:
            out.append({"kind": "straight", "start_us": a, "end_us": b, "apex_us": None,
                        "direction": None, "heading_change_deg": None,
                        "max_abs_curvature": None, "airtime_s": None,
                        "landing_peak_mps2": None})
    return out


def _stretches(flag: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """Inclusive (first, last) index pairs of runs of True."""
    edges = np.diff(np.concatenate(([0], flag.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def _jumps(imu: ImuSeries, p: SegmentsConfig) -> list[dict[str, Any]]:
    norm = _smooth(np.sqrt(imu.ax**2 + imu.ay**2 + imu.az**2), imu.t, 0.05)
    rows: list[dict[str, Any]] = []
    for a, b in _stretches(norm < p.free_fall_g * G):
        if imu.t[b] - imu.t[a] < p.min_air_s:
            continue
        hi = int(np.searchsorted(imu.t, imu.t[b] + p.landing_window_s, side="right"))
        if hi <= b + 1:
            continue
        peak = float(norm[b + 1:hi].max())
        if peak < p.landing_g * G:
            continue
        land = b + 1
        rows.append({"kind": "jump", "start_us": int(imu.ts_us[a]), "end_us": int(imu.ts_us[land]),
                     "apex_us": None, "direction": None, "heading_change_deg": None,
                     "max_abs_curvature": None, "airtime_s": float(imu.t[land] - imu.t[a]),
                     "landing_peak_mps2": peak})
    return rows


def _label_laps(rows: list[dict[str, Any]], laps: pa.Table | None) -> None:
    """Set each row's ``lap`` to the lap containing its apex (corners) or midpoint."""
    if laps is None or laps.num_rows == 0:
        for r in rows:
            r["lap"] = None
        return
    starts, ends = ts_micros(laps, "start_ts"), ts_micros(laps, "end_ts")
    numbers = laps.column("lap").to_pylist()
    for r in rows:
        at = r["apex_us"] if r["apex_us"] is not None else (r["start_us"] + r["end_us"]) // 2
        k = int(np.searchsorted(starts, at, side="right")) - 1
        r["lap"] = numbers[k] if 0 <= k < starts.size and at < ends[k] else None


def segments_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The ``segments`` dataset, one row per corner / straight / jump, by start time."""
    def col(key: str) -> list[Any]:
        return [r.get(key) for r in rows]

    apex = col("apex_us")
    return pa.table({
        "segment_id": pa.array(range(1, len(rows) + 1), type=pa.int32()),
        "kind": pa.array(col("kind"), type=pa.string()),
        "lap": pa.array(col("lap"), type=pa.int32()),
        "start_ts": micros_to_ts(np.array(col("start_us"), dtype=np.int64)),
        "end_ts": micros_to_ts(np.array(col("end_us"), dtype=np.int64)),
        "apex_ts": pa.array(apex, type=pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "direction": pa.array(col("direction"), type=pa.string()),
        "heading_change_deg": pa.array(col("heading_change_deg"), type=pa.float64()),
        "max_abs_curvature": pa.array(col("max_abs_curvature"), type=pa.float64()),
        "airtime_s": pa.array(col("airtime_s"), type=pa.float64()),
        "landing_peak_mps2": pa.array(col("landing_peak_mps2"), type=pa.float64()),
    })
