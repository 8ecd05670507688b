"""Lap analysis beyond the lap table: sectors and mini-sectors, the delta channel, corners.

Called by ``compute_metrics``; pure, like every stage.

Theory of operation
-------------------
1. **Reference lap.** ``config.laps.reference_lap`` when the run has that lap, else the best
   valid lap. Without one there is no delta and no corner analysis (``reason``
   ``NO_REFERENCE_LAP``); sector times and their bests still are.
2. **Position on the reference lap.** Every lap is placed on the reference lap's path, not
   compared by distance driven (which drifts by metres per lap). The reference path is a cubic
   least-squares spline of east and north against the reference lap's distance travelled,
   knots every :data:`_KNOT_M`; each sample of a lap (at most :data:`_RATE_HZ` of them a
   second) is projected onto it - the nearest of the path's points near where the lap's own
   progress puts it (so a track that crosses itself is not confused), then onto the path's
   tangent there. Projections carry the fixes' noise along the track, so the lap's progress is
   taken as its own distance travelled, scaled to the reference length, plus the *smoothed*
   difference between the projection and that (a slow drift of a few metres), pinned to 0 at
   both crossings. The lap thus starts at 0 m at its start crossing and ends at the reference
   length at its end crossing, whatever its own distance.
3. **Delta channel** (dataset ``lap_delta``): per lap, at every :data:`_DELTA_STEP_M` of the
   reference path and at its end, the time since the lap's start crossing and ``delta_s`` =
   that time minus the reference lap's at the same place. At the end it is exactly the
   lap-time difference (both laps reach the reference length at their crossings).
4. **Mini-sectors** (``config.laps.mini_sectors`` equal parts of the reference length) are
   timed on that channel; **sectors** are the timing-line sectors of ``detect_laps`` (dataset
   ``sector_times``), placed on the reference path by the reference lap's crossings. Both go to
   ``sector_metrics`` with their delta to the best valid lap's. The **theoretical best** is the
   sum of the best valid sectors (and, apart, of the best mini-sectors).
5. **Corners** (dataset ``corner_metrics``) are the reference lap's corners from
   ``detect_segments``, placed on its path; for every lap: the **apex** (lowest speed inside
   the corner), the **braking point** (highest speed between the previous corner's end and the
   apex), the exit speed (at the corner's end) and the time gained or lost against the
   reference lap from the reference's braking point to the corner's end (the delta channel's
   change over it). Speeds are smoothed over :data:`_SPEED_SMOOTH_S` first, so one noisy
   sample is not an apex.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Final

import numpy as np
import pyarrow as pa
from scipy.interpolate import make_lsq_spline
from scipy.ndimage import uniform_filter1d

from schemas.run_config import LapsConfig
from stages.batch.geo import FloatArray, LocalFrame, Motion, travelled, ts_micros
from stages.batch.lap_datasets import (
    CORNER_METRICS_SCHEMA,
    LAP_DELTA_SCHEMA,
    SECTOR_METRICS_SCHEMA,
)

__all__ = ["NO_REFERENCE_LAP", "LapAnalysis", "analyse"]

NO_REFERENCE_LAP: Final = "NO_REFERENCE_LAP"
_RATE_HZ: Final = 10.0
_KNOT_M: Final = 10.0
_DELTA_STEP_M: Final = 5.0
_DRIFT_SMOOTH_M: Final = 60.0
"""Spacing of the knots of the (projection - own distance) drift's smoothing spline."""
_SPEED_SMOOTH_S: Final = 0.3
_SEARCH_M: Final = 25
"""How far (m) from a sample's own progress its place on the reference path is looked for."""


@dataclass(frozen=True, kw_only=True)
class LapAnalysis:
    """What :func:`analyse` found: three datasets and the summary's additions."""

    sector_metrics: pa.Table
    lap_delta: pa.Table
    corner_metrics: pa.Table
    summary: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class _Lap:
    lap: int
    a: float  # start crossing, s since the motion's first sample
    b: float
    valid: bool


@dataclass(frozen=True, kw_only=True)
class _Placed:
    """One lap placed on the reference path: its samples' times, progress and speed."""

    t: FloatArray  # since the lap's start crossing, from 0 to its lap time
    s: FloatArray  # progress along the reference path, from 0 to its length, non-decreasing
    v: FloatArray

    def time_at(self, s: FloatArray) -> FloatArray:
        return np.asarray(np.interp(s, self.s, self.t))


def analyse(motion: Motion | None, laps: pa.Table | None, sectors: pa.Table | None,
            segments: pa.Table | None, p: LapsConfig) -> LapAnalysis:
    """The sector metrics, delta channel and corner metrics of a session (module docstring)."""
    rows = _laps(motion, laps)
    ref = _reference(rows, p)
    placed: dict[int, _Placed] = {}
    length = None
    if motion is not None and ref is not None:
        path = _RefPath.build(motion, ref)
        if path is not None:
            length = path.length
            for lap in rows:
                got = path.place(lap)
                if got is not None:
                    placed[lap.lap] = got
    if ref is None or ref.lap not in placed or length is None:
        sector_rows = _timed_sectors(sectors, {}, None)
        out = _sector_table(_with_bests(sector_rows, rows))
        return LapAnalysis(
            sector_metrics=out, lap_delta=LAP_DELTA_SCHEMA.empty_table(),
            corner_metrics=_corner_table([]),
            summary={"reference_lap": None, "delta_available": False,
                     "delta_reason": NO_REFERENCE_LAP, "corner_count": 0,
                     **_theoretical(out)})
    delta = _delta(placed, ref.lap, length)
    sector_rows = (_timed_sectors(sectors, placed, ref)
                   + _mini_sectors(placed, length, p.mini_sectors))
    out = _sector_table(_with_bests(sector_rows, rows))
    corners = _corners(placed, ref, segments, motion)
    return LapAnalysis(
        sector_metrics=out, lap_delta=delta,
        corner_metrics=_corner_table(corners),
        summary={"reference_lap": ref.lap, "delta_available": True, "delta_reason": None,
                 "corner_count": len({c["corner"] for c in corners}), **_theoretical(out)})


def _laps(motion: Motion | None, laps: pa.Table | None) -> list[_Lap]:
    if motion is None or laps is None or laps.num_rows == 0:
        return []
    t0 = int(motion.ts_us[0])
    start = (ts_micros(laps, "start_ts") - t0) / 1e6
    end = (ts_micros(laps, "end_ts") - t0) / 1e6
    valid = laps.column("valid").to_pylist()
    return [_Lap(lap=int(n), a=float(a), b=float(b), valid=bool(v))
            for n, a, b, v in zip(laps.column("lap").to_pylist(), start.tolist(), end.tolist(),
                                  valid, strict=True)]


def _reference(rows: list[_Lap], p: LapsConfig) -> _Lap | None:
    if p.reference_lap is not None:
        return next((x for x in rows if x.lap == p.reference_lap), None)
    valid = [x for x in rows if x.valid]
    return min(valid, key=lambda x: x.b - x.a) if valid else None


@dataclass(frozen=True, kw_only=True)
class _RefPath:
    """The reference lap's path as a spline of (east, north) against its distance."""

    motion_t: FloatArray
    dist: FloatArray  # the whole session's distance travelled
    e: FloatArray
    n: FloatArray
    v: FloatArray
    grid: FloatArray  # 1 m points along the path
    pts: FloatArray
    tangent: FloatArray
    length: float

    @classmethod
    def build(cls, m: Motion, ref: _Lap) -> _RefPath | None:
        step = float(np.median(np.diff(m.t))) if m.t.size > 1 else 0.0
        stride = max(1, round(1.0 / (_RATE_HZ * step))) if step > 0 else 1
        t, lat, lon, v = m.t[::stride], m.lat[::stride], m.lon[::stride], m.speed[::stride]
        frame = LocalFrame.around(lat, lon)
        e, n = frame.to_en(lat, lon)
        dist = travelled(t, v)
        if not np.isfinite(dist).all():
            return None
        d0, d1 = np.interp([ref.a, ref.b], t, dist)
        length = float(d1 - d0)
        inside = (t >= ref.a) & (t <= ref.b)
        u = dist[inside] - d0
        if length <= 2 * _KNOT_M or u.size < 16:
            return None
        inner = np.arange(_KNOT_M, length - _KNOT_M / 2, _KNOT_M)
        inner = inner[(inner > u[0]) & (inner < u[-1])]
        knots = np.concatenate(([u[0]] * 4, inner, [u[-1]] * 4))
        try:
            spline = make_lsq_spline(u, np.column_stack([e[inside], n[inside]]), knots, k=3)
        except (ValueError, np.linalg.LinAlgError):
            return None
        grid = np.linspace(0.0, length, max(2, int(length) + 1))
        pts = spline(grid)
        tan = spline.derivative()(grid)
        tan /= np.maximum(np.linalg.norm(tan, axis=1, keepdims=True), 1e-9)
        return cls(motion_t=t, dist=dist, e=e, n=n, v=np.nan_to_num(v), grid=grid, pts=pts,
                   tangent=tan, length=length)

    def place(self, lap: _Lap) -> _Placed | None:
        """The lap on the reference path (step 2 of the module docstring)."""
        t = self.motion_t
        lo, hi = np.searchsorted(t, [lap.a, lap.b])
        if hi - lo < 4:
            return None
        tt = np.concatenate(([lap.a], t[lo:hi], [lap.b]))
        e = np.interp(tt, t, self.e)
        n = np.interp(tt, t, self.n)
        d = np.interp(tt, t, self.dist)
        v = np.interp(tt, t, self.v)
        own = (d - d[0]) / max(d[-1] - d[0], 1e-9) * self.length
        # The nearest path point within ±_SEARCH_M of where the lap's own progress puts the
        # sample (so a track that crosses itself is not confused; 1 m points, so a window of
        # indices); one at the window's edge is no match and the sample keeps its own progress.
        span = np.arange(-_SEARCH_M, _SEARCH_M + 1)
        cand = np.clip(np.round(own).astype(np.int64)[:, None] + span, 0, self.grid.size - 1)
        gap = np.hypot(self.pts[cand, 0] - e[:, None], self.pts[cand, 1] - n[:, None])
        pick = np.argmin(gap, axis=1)
        j = cand[np.arange(tt.size), pick]
        lost = (pick == 0) | (pick == span.size - 1)
        rel = np.column_stack([e, n]) - self.pts[j]
        proj = self.grid[j] + np.einsum("ij,ij->i", rel, self.tangent[j])
        proj = np.where(lost, own, proj)
        drift = _smooth_drift(own, proj - own, self.length)
        s = np.maximum.accumulate(np.clip(own + drift, 0.0, self.length))
        s[0], s[-1] = 0.0, self.length
        return _Placed(t=tt - lap.a, s=s, v=_smooth_speed(tt, v))


def _smooth_drift(own: FloatArray, drift: FloatArray, length: float) -> FloatArray:
    """A least-squares spline of the drift against progress, pinned to 0 at both ends."""
    inner = np.arange(_DRIFT_SMOOTH_M, length - _DRIFT_SMOOTH_M / 2, _DRIFT_SMOOTH_M)
    x = own
    if inner.size == 0 or x.size < inner.size + 8 or np.any(np.diff(x) < 0):
        return np.zeros_like(drift)
    knots = np.concatenate(([x[0]] * 4, inner[(inner > x[0]) & (inner < x[-1])], [x[-1]] * 4))
    try:
        fit = make_lsq_spline(x, drift, knots, k=3)(x)
    except (ValueError, np.linalg.LinAlgError):
        return np.zeros_like(drift)
    # Pin the ends: remove the straight line through the fit's end values.
    ramp = fit[0] + (fit[-1] - fit[0]) * (x - x[0]) / max(x[-1] - x[0], 1e-9)
    return np.asarray(fit - ramp)


def _smooth_speed(t: FloatArray, v: FloatArray) -> FloatArray:
    step = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    size = max(1, round(_SPEED_SMOOTH_S / step)) if step > 0 else 1
    return np.asarray(uniform_filter1d(v, size, mode="nearest"))


def _delta(placed: dict[int, _Placed], ref: int, length: float) -> pa.Table:
    grid = np.append(np.arange(0.0, length, _DELTA_STEP_M), length)
    t_ref = placed[ref].time_at(grid)
    laps, times, speeds = [], [], []
    for lap, pl in sorted(placed.items()):
        t = pl.time_at(grid)
        laps.append(np.full(grid.size, lap, dtype=np.int32))
        times.append(t)
        speeds.append(np.interp(t, pl.t, pl.v))
    t_all = np.concatenate(times)
    return pa.Table.from_pydict({
        "lap": np.concatenate(laps), "reference_lap": np.full(t_all.size, ref, dtype=np.int32),
        "distance_m": np.tile(grid, len(times)), "time_s": t_all,
        "delta_s": t_all - np.tile(t_ref, len(times)), "speed_mps": np.concatenate(speeds),
    }, schema=LAP_DELTA_SCHEMA)


def _timed_sectors(sectors: pa.Table | None, placed: dict[int, _Placed],
                   ref: _Lap | None) -> list[dict[str, Any]]:
    """The timing-line sectors of ``detect_laps``, placed on the reference path when the
    reference lap has them."""
    if sectors is None or sectors.num_rows == 0:
        return []
    rows = sectors.to_pylist()
    where: dict[int, tuple[float, float]] = {}
    if ref is not None and ref.lap in placed:
        pl = placed[ref.lap]
        start_us = {r["sector"]: r for r in rows if r["lap"] == ref.lap}
        lap_start = min((r["start_ts"] for r in start_us.values()), default=None)
        if lap_start is not None:
            for k, r in start_us.items():
                a = (r["start_ts"] - lap_start).total_seconds()
                b = (r["end_ts"] - lap_start).total_seconds()
                lo, hi = np.interp([a, b], pl.t, pl.s)
                where[k] = (float(lo), float(hi))
    return [{"lap": r["lap"], "kind": "sector", "sector": r["sector"],
             "start_m": where.get(r["sector"], (None, None))[0],
             "end_m": where.get(r["sector"], (None, None))[1],
             "time_s": r["time_s"], "sigma_s": r["sigma_s"]} for r in rows]


def _mini_sectors(placed: dict[int, _Placed], length: float,
                  count: int) -> list[dict[str, Any]]:
    if count <= 0:
        return []
    edges = np.linspace(0.0, length, count + 1)
    out = []
    for lap, pl in sorted(placed.items()):
        t = pl.time_at(edges)
        out += [{"lap": lap, "kind": "mini", "sector": k + 1, "start_m": float(a),
                 "end_m": float(b), "time_s": float(tb - ta), "sigma_s": None}
                for k, ((a, b), (ta, tb)) in enumerate(zip(pairwise(edges.tolist()),
                                                           pairwise(t.tolist()), strict=True))]
    return out


def _with_bests(rows: list[dict[str, Any]], laps: list[_Lap]) -> list[dict[str, Any]]:
    valid = {x.lap for x in laps if x.valid}
    best: dict[tuple[str, int], float] = {}
    for r in rows:
        if r["lap"] in valid:
            key = (r["kind"], r["sector"])
            best[key] = min(best.get(key, np.inf), r["time_s"])
    for r in rows:
        b = best.get((r["kind"], r["sector"]))
        r["delta_to_best_s"] = r["time_s"] - b if b is not None else None
        r["is_best"] = r["lap"] in valid and b is not None and r["time_s"] == b
    return rows


def _theoretical(table: pa.Table) -> dict[str, Any]:
    """The sums of the best valid sectors and of the best valid mini-sectors (``None`` when a
    sector has no valid time)."""
    rows = table.to_pylist()
    out: dict[str, Any] = {}
    for kind, key in (("sector", "theoretical_best_s"), ("mini", "theoretical_best_mini_s")):
        numbers = {r["sector"] for r in rows if r["kind"] == kind}
        best = {r["sector"]: r["time_s"] for r in rows if r["kind"] == kind and r["is_best"]}
        out[key] = float(sum(best.values())) if numbers and set(best) == numbers else None
    return out


def _corners(placed: dict[int, _Placed], ref: _Lap, segments: pa.Table | None,
             motion: Motion | None) -> list[dict[str, Any]]:
    if segments is None or segments.num_rows == 0 or motion is None:
        return []
    t0 = int(motion.ts_us[0])
    rows = [r for r in segments.to_pylist() if r["kind"] == "corner" and r["lap"] == ref.lap]
    if not rows:
        return []
    pl_ref = placed[ref.lap]

    def on_ref(ts: Any) -> float:
        sec = (int(pa.scalar(ts, pa.timestamp("us", tz="UTC")).value) - t0) / 1e6 - ref.a
        return float(np.interp(sec, pl_ref.t, pl_ref.s))

    spans = [(on_ref(r["start_ts"]), on_ref(r["end_ts"]), r["direction"]) for r in rows]
    ref_brake: dict[int, float] = {}  # corner -> the reference lap's braking point
    out: list[dict[str, Any]] = []
    for lap in [ref.lap, *sorted(k for k in placed if k != ref.lap)]:
        pl = placed[lap]
        prev_end = 0.0
        for c, (s0, s1, direction) in enumerate(spans, start=1):
            inside = (pl.s >= s0) & (pl.s <= s1)
            if not inside.any():
                prev_end = s1
                continue
            idx = np.flatnonzero(inside)
            apex = int(idx[np.argmin(pl.v[idx])])
            before = np.flatnonzero((pl.s >= prev_end) & (pl.s <= pl.s[apex]))
            brake = int(before[np.argmax(pl.v[before])]) if before.size else int(idx[0])
            if lap == ref.lap:
                ref_brake[c] = float(pl.s[brake])
            from_m = ref_brake.get(c, float(pl.s[brake]))
            span = np.array([from_m, s1])
            behind = pl.time_at(span) - pl_ref.time_at(span)  # the delta at both ends
            lost = float(behind[1] - behind[0])
            out.append({
                "lap": lap, "corner": c, "reference_lap": ref.lap, "direction": direction,
                "start_m": s0, "end_m": s1, "braking_m": float(pl.s[brake]),
                "apex_m": float(pl.s[apex]), "entry_speed_mps": float(pl.v[brake]),
                "apex_speed_mps": float(pl.v[apex]),
                "exit_speed_mps": float(np.interp(s1, pl.s, pl.v)),
                "time_delta_s": lost,
            })
            prev_end = s1
    out.sort(key=lambda r: (r["lap"], r["corner"]))
    return out


def _sector_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SECTOR_METRICS_SCHEMA)


def _corner_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=CORNER_METRICS_SCHEMA)
