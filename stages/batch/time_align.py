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
5. GNSS rows without a speed (GPX, some NMEA) get one derived from neighbouring positions,
   and rows without a course (above 1 m/s) the bearing between neighbours; both counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError, StageInput, StageOutput

_GAP_FACTOR: Final = 2.5
_EARTH_RADIUS_M: Final = 6_371_008.8
_COURSE_MIN_SPEED: Final = 1.0


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


def _fill_motion(gnss: pa.Table) -> tuple[pa.Table, int, int]:
    """Fill null speed / course from neighbouring positions (central differences)."""
    n = gnss.num_rows
    speed = pc.cast(gnss.column("speed_mps"), pa.float64()).to_numpy(zero_copy_only=False)
    course = pc.cast(gnss.column("course_deg"), pa.float64()).to_numpy(zero_copy_only=False)
    need_speed, need_course = np.isnan(speed), np.isnan(course)
    if n < 2 or not (need_speed.any() or need_course.any()):
        return gnss, 0, 0
    lat = np.radians(gnss.column("lat_deg").to_numpy())
    lon = np.radians(gnss.column("lon_deg").to_numpy())
    t = (_ts(gnss) - _ts(gnss)[0]) / 1e6
    i0 = np.concatenate(([0], np.arange(n - 2), [n - 2]))
    i1 = np.concatenate(([1], np.arange(2, n), [n - 1]))
    dlat, dlon = lat[i1] - lat[i0], lon[i1] - lon[i0]
    a = np.sin(dlat / 2) ** 2 + np.cos(lat[i0]) * np.cos(lat[i1]) * np.sin(dlon / 2) ** 2
    dist = 2 * _EARTH_RADIUS_M * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
    derived = dist / (t[i1] - t[i0])
    y = np.sin(dlon) * np.cos(lat[i1])
    x = np.cos(lat[i0]) * np.sin(lat[i1]) - np.sin(lat[i0]) * np.cos(lat[i1]) * np.cos(dlon)
    bearing = np.mod(np.degrees(np.arctan2(y, x)), 360.0)
    speed = np.where(need_speed, derived, speed)
    fill_course = need_course & (speed > _COURSE_MIN_SPEED)
    course = np.where(fill_course, bearing, course)
    gnss = gnss.set_column(
        gnss.column_names.index("speed_mps"), "speed_mps", pa.array(speed, from_pandas=True)
    )
    gnss = gnss.set_column(
        gnss.column_names.index("course_deg"), "course_deg", pa.array(course, from_pandas=True)
    )
    return gnss, int(need_speed.sum()), int(fill_course.sum())


def _offsets(config: Mapping[str, Any]) -> dict[str, int]:
    raw = config.get("time_offsets_s", {}) or {}
    if not isinstance(raw, Mapping):
        raise SessionStageError("time_offsets_s must be a mapping", code=codes.INVALID_CONFIG)
    out: dict[str, int] = {}
    for stream, secs in raw.items():
        if stream not in canonical.SCHEMAS or isinstance(secs, bool):
            raise SessionStageError(
                f"bad time offset for {stream!r}", code=codes.INVALID_CONFIG
            )
        if not isinstance(secs, int | float):
            raise SessionStageError(
                f"bad time offset for {stream!r}", code=codes.INVALID_CONFIG
            )
        out[stream] = round(secs * 1e6)
    return out


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
    gnss, speed_filled, course_filled = _fill_motion(datasets[canonical.GNSS])
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
            "gnss_course_filled": course_filled,
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
