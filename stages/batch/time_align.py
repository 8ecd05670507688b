"""Job ``time_align``: monotonic streams on one timeline, with clock statistics.

Theory of operation
-------------------
1. Optional per-stream offsets (``config["time_offsets_s"] = {"imu": -0.02}``) correct a
   known sensor latency before anything else.
2. Each stream keeps a sample only when its time is strictly after every earlier sample's
   (a running maximum): equal times are ``duplicates``, earlier ones ``backwards``; both are
   removed and counted. The first occurrence wins, so a receiver that repeats an epoch keeps
   the original. AUX is handled per channel.
3. Timing statistics per stream: the median step gives the rate; steps above 2.5 x median
   are ``gaps`` and split the stream into segments; inside segments each step counts
   ``round(dt / median)`` sample slots (so a dropped sample is not mistaken for drift), and a
   pooled least-squares fit of time against slot (one intercept per segment) gives the
   effective period. ``drift_ppm`` compares it with the nominal period (the median rate
   rounded to whole Hz, or the median period to whole seconds below 1 Hz); ``jitter_rms_ms``
   and ``jitter_max_ms`` are the residuals of that fit.
4. One timeline: ``t0_us`` is the earliest sample of any stream, offsets of every stream's
   start and end are relative to it, and ``common_start_us``/``common_end_us`` is the range
   GNSS and IMU both cover (when both exist).
5. GNSS rows without a speed or course are filled, never by differencing two neighbouring
   fixes (at 10 Hz they are 0.2 s apart, and 2 m of position noise becomes ±10 m/s of speed,
   which then decides the session's top speed and where an automatic start/finish line goes):

   - a row between two rows that carry the receiver's own (Doppler) value at most
     ``_INTERP_MAX_S`` apart - a lost RMC sentence, a dropped VTG - gets that value linearly
     interpolated in time (course through the shorter way round); counted as
     ``gnss_speed_interpolated``;
   - any other row (GPX, GGA-only NMEA, a long stretch without speed) gets the speed and course
     of a velocity fitted to the positions: the slope of a least-squares line through every fix
     within ±``_FIT_HALF_S`` (at least 1.5 fix intervals, so 1 Hz logs still use three fixes),
     which averages the noise of about twenty fixes at 10 Hz.

   Courses are filled only above 1 m/s (below that a bearing is noise). ``gnss_speed_filled``
   counts every filled speed; ``gnss_speed_source`` says whether speeds are the receiver's,
   derived, or mixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.batch import canonical
from stages.batch.contract import StageInput, StageOutput, run_config
from stages.batch.geo import LocalFrame

_GAP_FACTOR: Final = 2.5
_COURSE_MIN_SPEED: Final = 1.0
# Receiver values at most this far apart bracket a gap short enough to interpolate across.
_INTERP_MAX_S: Final = 2.0
# Half-width of the least-squares position fit that derives a velocity from fixes.
_FIT_HALF_S: Final = 1.0


def monotonic_mask(ts: np.ndarray) -> tuple[np.ndarray, int, int, float]:
    """Keep-mask of strictly increasing samples, and (duplicates, backwards, max step back s)."""
    if len(ts) == 0:
        return np.ones(0, dtype=bool), 0, 0, 0.0
    prev = np.empty_like(ts)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = np.maximum.accumulate(ts)[:-1]
    keep = ts > prev
    dup = int((ts == prev).sum())
    back = ts < prev
    max_back = float((prev[back] - ts[back]).max()) / 1e6 if back.any() else 0.0
    return keep, dup, int(back.sum()), max_back


def _nominal_period(median: float) -> float:
    if median <= 1.0:
        return 1.0 / max(round(1.0 / median), 1)
    return float(max(round(median), 1))


def timing(ts: np.ndarray) -> dict[str, Any]:
    """Rate, gaps, drift and jitter of strictly increasing epoch-microsecond ``ts``."""
    if len(ts) < 3:
        return {
            "rate_hz": None,
            "nominal_hz": None,
            "drift_ppm": None,
            "jitter_rms_ms": None,
            "jitter_max_ms": None,
            "gap_count": 0,
            "max_gap_s": 0.0,
        }
    t = (ts - ts[0]) / 1e6
    dt = np.diff(t)
    median = float(np.median(dt))
    gap = dt > _GAP_FACTOR * median
    seg = np.concatenate(([0], np.cumsum(gap)))
    steps = np.where(gap, 0, np.maximum(np.round(dt / median), 1))
    slot = np.concatenate(([0.0], np.cumsum(steps)))
    # per-segment slot origin so intercepts are per segment; pooled slope across segments
    n = np.bincount(seg).astype(float)
    mean_k = np.bincount(seg, slot) / n
    mean_t = np.bincount(seg, t) / n
    dk = slot - mean_k[seg]
    dtt = t - mean_t[seg]
    sxx = float((dk * dk).sum())
    period = float((dk * dtt).sum()) / sxx if sxx > 0 else median
    resid = dtt - period * dk
    nominal = _nominal_period(median)
    return {
        "rate_hz": 1.0 / period,
        "nominal_hz": 1.0 / nominal,
        "drift_ppm": (period / nominal - 1.0) * 1e6,
        "jitter_rms_ms": float(np.sqrt(np.mean(resid * resid))) * 1e3,
        "jitter_max_ms": float(np.abs(resid).max()) * 1e3,
        "gap_count": int(gap.sum()),
        "max_gap_s": float(dt[gap].max()) if gap.any() else 0.0,
    }


def _ts(table: pa.Table) -> np.ndarray:
    out: np.ndarray = table.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False)
    return out


def _clean(stream: str, table: pa.Table) -> tuple[pa.Table, dict[str, Any]]:
    ts = _ts(table)
    if stream != canonical.AUX:
        keep, dup, back, max_back = monotonic_mask(ts)
    else:
        keep = np.zeros(len(ts), dtype=bool)
        dup = back = 0
        max_back = 0.0
        channel = table.column("channel").to_numpy(zero_copy_only=False)
        for ch in np.unique(channel) if len(channel) else ():
            idx = np.flatnonzero(channel == ch)
            k, d, b, m = monotonic_mask(ts[idx])
            keep[idx[k]] = True
            dup, back, max_back = dup + d, back + b, max(max_back, m)
    stats = {
        "rows_in": table.num_rows,
        "rows_out": int(keep.sum()),
        "duplicates": dup,
        "backwards": back,
        "max_backwards_s": max_back,
    }
    return table.filter(pa.array(keep)), stats


def _fill_motion(gnss: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """Fill null speed / course (step 5 of the module docstring); returns what was filled."""
    speed = pc.cast(gnss.column("speed_mps"), pa.float64()).to_numpy(zero_copy_only=False)
    course = pc.cast(gnss.column("course_deg"), pa.float64()).to_numpy(zero_copy_only=False)
    need_speed, need_course = np.isnan(speed), np.isnan(course)
    counts = {"speed": 0, "speed_interpolated": 0, "course": 0}
    if gnss.num_rows < 2 or not (need_speed.any() or need_course.any()):
        return gnss, counts
    t = (_ts(gnss) - _ts(gnss)[0]) / 1e6
    lat = pc.cast(gnss.column("lat_deg"), pa.float64()).to_numpy(zero_copy_only=False)
    lon = pc.cast(gnss.column("lon_deg"), pa.float64()).to_numpy(zero_copy_only=False)
    ve, vn = _fitted_velocity(t, lat, lon)
    near_speed, speed_i = _across_gaps(t, speed)
    near_course, course_i = _across_gaps(t, _unwrap_deg(course))
    interpolated = need_speed & near_speed
    speed = np.where(need_speed, np.where(near_speed, speed_i, np.hypot(ve, vn)), speed)
    bearing = np.mod(np.degrees(np.arctan2(ve, vn)), 360.0)
    candidate = np.where(near_course, np.mod(course_i, 360.0), bearing)
    fill_course = need_course & (speed > _COURSE_MIN_SPEED) & np.isfinite(candidate)
    course = np.where(fill_course, candidate, course)
    gnss = gnss.set_column(
        gnss.column_names.index("speed_mps"), "speed_mps", pa.array(speed, from_pandas=True)
    )
    gnss = gnss.set_column(
        gnss.column_names.index("course_deg"), "course_deg", pa.array(course, from_pandas=True)
    )
    counts["speed"] = int((need_speed & np.isfinite(speed)).sum())
    counts["speed_interpolated"] = int(interpolated.sum())
    counts["course"] = int(fill_course.sum())
    return gnss, counts


def _unwrap_deg(course: np.ndarray) -> np.ndarray:
    """Known courses made continuous (no 359 -> 0 jump), so interpolating them is meaningful."""
    out = np.full_like(course, np.nan)
    ok = np.isfinite(course)
    out[ok] = np.degrees(np.unwrap(np.radians(course[ok])))
    return out


def _across_gaps(t: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where ``x`` is NaN between two known values at most ``_INTERP_MAX_S`` apart: that mask,
    and ``x`` linearly interpolated in time (NaN where nothing is known)."""
    ok = np.isfinite(x)
    if not ok.any():
        return np.zeros(x.size, dtype=bool), np.full(x.size, np.nan)
    known = np.flatnonzero(ok)
    after = np.searchsorted(known, np.arange(x.size))  # first known index >= i
    inside = (after > 0) & (after < known.size)
    prev = known[np.clip(after - 1, 0, known.size - 1)]
    nxt = known[np.clip(after, 0, known.size - 1)]
    near = ~ok & inside & (t[nxt] - t[prev] <= _INTERP_MAX_S)
    return near, np.interp(t, t[known], x[known])


def _fitted_velocity(t: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> tuple[np.ndarray, ...]:
    """East/north velocity (m/s) at each fix: the slope of a least-squares line through the
    positions within ``half`` seconds (wide enough to average the fixes' noise), falling back
    to the two neighbouring fixes where fewer than three positions are that close."""
    n = t.size
    ok = np.isfinite(lat) & np.isfinite(lon)
    nan = np.full(n, np.nan)
    if ok.sum() < 2:
        return nan, nan
    frame = LocalFrame.around(lat[ok], lon[ok])
    e, north = frame.to_en(lat, lon)
    step = float(np.median(np.diff(t[ok]))) if ok.sum() > 2 else 1.0
    half = max(_FIT_HALF_S, 1.5 * step)
    reach = int(min(np.ceil(half / max(step, 1e-3)) + 1, 200))
    sw = swt = swtt = np.zeros(n)
    swe = swte = swn = swtn = np.zeros(n)
    for k in range(-reach, reach + 1):
        j = np.clip(np.arange(n) + k, 0, n - 1)
        dt = t[j] - t
        use = ok & ok[j] & (np.abs(dt) <= half) & (np.arange(n) + k == j)
        w = use.astype(float)
        dt0 = np.where(use, dt, 0.0)
        e0, n0 = np.where(use, e[j], 0.0), np.where(use, north[j], 0.0)
        sw, swt, swtt = sw + w, swt + dt0, swtt + dt0 * dt0
        swe, swte, swn, swtn = swe + e0, swte + dt0 * e0, swn + n0, swtn + dt0 * n0
    var = swtt - swt * swt / np.maximum(sw, 1.0)
    fit = (sw >= 3) & (var > 1e-9)
    safe = np.where(fit, var, 1.0)
    ve = np.where(fit, (swte - swt * swe / np.maximum(sw, 1.0)) / safe, np.nan)
    vn = np.where(fit, (swtn - swt * swn / np.maximum(sw, 1.0)) / safe, np.nan)
    i0 = np.concatenate(([0], np.arange(n - 2), [n - 2]))
    i1 = np.concatenate(([1], np.arange(2, n), [n - 1]))
    span = t[i1] - t[i0]
    pair_e = (e[i1] - e[i0]) / np.where(span > 0, span, np.nan)
    pair_n = (north[i1] - north[i0]) / np.where(span > 0, span, np.nan)
    return np.where(fit, ve, pair_e), np.where(fit, vn, pair_n)


def _offsets(config: Mapping[str, Any]) -> dict[str, int]:
    return {stream: round(secs * 1e6)
            for stream, secs in run_config(config).time_offsets_s.items()}


def run(inp: StageInput) -> StageOutput:
    """Clean and align the normalised streams (see module docstring)."""
    offsets = _offsets(inp.config)
    datasets: dict[str, pa.Table] = {}
    streams: dict[str, dict[str, Any]] = {}
    for stream in canonical.STREAMS:
        table = inp.datasets.get(stream)
        table = canonical.empty(stream) if table is None else canonical.conform(stream, table)
        if offsets.get(stream):
            shifted = pa.array(_ts(table) + offsets[stream]).cast(canonical.TS_TYPE)
            table = table.set_column(0, table.schema.field(0), shifted)
        table, stats = _clean(stream, table)
        if stream != canonical.AUX:
            stats.update(timing(_ts(table)))
        datasets[stream], streams[stream] = table, stats
    gnss, filled = _fill_motion(datasets[canonical.GNSS])
    speed_filled = filled["speed"]
    datasets[canonical.GNSS] = canonical.conform(canonical.GNSS, gnss)
    summary = _timeline(datasets, streams)
    gnss_rows = datasets[canonical.GNSS].num_rows
    summary.update(
        {
            "streams": streams,
            "duplicates_removed": sum(s["duplicates"] for s in streams.values()),
            "backwards_removed": sum(s["backwards"] for s in streams.values()),
            "gnss_fix": gnss_rows > 0,
            "gnss_speed_filled": speed_filled,
            "gnss_speed_interpolated": filled["speed_interpolated"],
            "gnss_course_filled": filled["course"],
            "gnss_speed_source": (
                "none"
                if gnss_rows == 0
                else "receiver"
                if speed_filled == 0
                else "derived"
                if speed_filled == gnss_rows
                else "mixed"
            ),
        }
    )
    return StageOutput(datasets=datasets, summary=summary)


def _timeline(
    datasets: Mapping[str, pa.Table], streams: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    spans = {s: (_ts(t)[0], _ts(t)[-1]) for s, t in datasets.items() if t.num_rows}
    if not spans:
        return {
            "t0_us": None,
            "t_end_us": None,
            "duration_s": 0.0,
            "common_start_us": None,
            "common_end_us": None,
            "relative_drift_ppm": None,
        }
    t0 = int(min(a for a, _ in spans.values()))
    t_end = int(max(b for _, b in spans.values()))
    for s, (a, b) in spans.items():
        streams[s]["start_offset_s"] = (int(a) - t0) / 1e6
        streams[s]["end_offset_s"] = (int(b) - t0) / 1e6
    core = [spans[s] for s in (canonical.GNSS, canonical.IMU) if s in spans] or list(spans.values())
    start, end = int(max(a for a, _ in core)), int(min(b for _, b in core))
    gd = streams[canonical.GNSS].get("drift_ppm")
    idr = streams[canonical.IMU].get("drift_ppm")
    return {
        "t0_us": t0,
        "t_end_us": t_end,
        "duration_s": (t_end - t0) / 1e6,
        "common_start_us": start if start <= end else None,
        "common_end_us": end if start <= end else None,
        "relative_drift_ppm": idr - gd if gd is not None and idr is not None else None,
    }
