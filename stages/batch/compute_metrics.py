"""Job ``compute_metrics``: per-lap and per-segment times, speeds and deltas.

Reads ``laps`` (``detect_laps``), ``segments`` (``detect_segments``) and the speed series of
``fused`` (else ``gnss``). Speeds are sample maxima and *time-weighted* means (trapezoidal
integral of speed over the interval divided by its duration, i.e. distance / time).

Produces:

- ``lap_metrics``: lap, start/end, ``lap_time_s``, ``delta_to_best_s`` (vs the best *valid*
  lap; a lap with a pit visit or a stop is not valid), ``is_best``, ``valid``, ``pit``,
  ``max_speed_mps``, ``avg_speed_mps``, ``distance_m`` (the lap's own ``distance_m`` from
  ``detect_laps``: speed integrated between the crossings).
- ``segment_metrics``: segment_id, kind, lap, ``lap_ordinal`` (n-th corner/straight of its lap),
  start/end, ``duration_s``, ``max_speed_mps``, ``avg_speed_mps``, ``min_speed_mps``,
  ``apex_speed_mps`` (corners) and ``delta_to_best_s`` against the quickest pass of the same
  ``(kind, lap_ordinal)`` over the valid laps whose segment count is the usual one (null
  elsewhere, since corners cannot be matched across laps that were segmented differently).

Summary: ``lap_count``, ``valid_lap_count``, ``best_lap``, ``best_lap_time_s``,
``mean_lap_time_s``, ``median_lap_time_s`` (valid laps), ``distance_m`` (the whole session's
speed integral), ``max_speed_mps``, ``lap_compare_available`` (≥ 2 valid laps).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from stages.batch.contract import StageInput, StageOutput, run_config
from stages.batch.geo import FloatArray, IntArray, Motion, column_f64, micros_to_ts, ts_micros
from stages.batch.lap_analysis import analyse
from stages.batch.lap_datasets import LAP_METRICS_SCHEMA

LAP_METRICS = "lap_metrics"
SEGMENT_METRICS = "segment_metrics"
SECTOR_METRICS = "sector_metrics"
LAP_DELTA = "lap_delta"
CORNER_METRICS = "corner_metrics"


class _Speed:
    """Speed samples with a running integral, for interval statistics."""

    def __init__(self, ts_us: IntArray, speed: FloatArray) -> None:
        ok = np.isfinite(speed)
        self.ts = ts_us[ok]
        self.t = (self.ts - (self.ts[0] if self.ts.size else 0)) / 1e6
        self.v = speed[ok]
        steps = 0.5 * (self.v[1:] + self.v[:-1]) * np.diff(self.t)
        self.cum = np.concatenate(([0.0], np.cumsum(steps)))

    def distance(self) -> float | None:
        """The whole session's distance: speed integrated over its samples (``None``: none)."""
        return float(self.cum[-1]) if self.ts.size >= 2 else None

    def _integral(self, ts_us: IntArray) -> FloatArray:
        t = (ts_us - (self.ts[0] if self.ts.size else 0)) / 1e6
        return np.asarray(np.interp(t, self.t, self.cum))

    def stats(self, start_us: IntArray, end_us: IntArray) -> dict[str, FloatArray]:
        """max / mean / min speed over each [start, end] (NaN where no sample falls inside)."""
        n = start_us.size
        out = {k: np.full(n, np.nan) for k in ("max", "avg", "min")}
        if self.ts.size < 2 or n == 0:
            return out
        dur = (end_us - start_us) / 1e6
        inside = dur > 0
        out["avg"][inside] = ((self._integral(end_us) - self._integral(start_us))[inside]
                              / dur[inside])
        lo = np.searchsorted(self.ts, start_us)
        hi = np.searchsorted(self.ts, end_us, side="right")
        has = hi > lo
        if has.any():
            idx = np.flatnonzero(has)
            pairs = list(zip(lo[idx].tolist(), hi[idx].tolist(), strict=True))
            out["max"][idx] = [float(self.v[a:b].max()) for a, b in pairs]
            out["min"][idx] = [float(self.v[a:b].min()) for a, b in pairs]
        return out

    def at(self, ts_us: IntArray) -> FloatArray:
        """Speed interpolated at the given instants."""
        t = (ts_us - (self.ts[0] if self.ts.size else 0)) / 1e6
        return np.asarray(np.interp(t, self.t, self.v)) if self.ts.size else np.full(t.size, np.nan)


def run(inp: StageInput) -> StageOutput:
    """Compute lap and segment metrics (see the module docstring)."""
    motion = Motion.from_datasets(inp.datasets)
    speed = _Speed(motion.ts_us, motion.speed) if motion else _Speed(
        np.zeros(0, dtype=np.int64), np.zeros(0))
    laps = inp.datasets.get("laps")
    segs = inp.datasets.get("segments")
    lap_tab, lap_summary, valid = _lap_metrics(laps, speed)
    seg_tab = _segment_metrics(segs, speed, valid)
    more = analyse(motion, laps, inp.datasets.get("sector_times"), segs,
                   run_config(inp.config).laps)
    return StageOutput(datasets={LAP_METRICS: lap_tab, SEGMENT_METRICS: seg_tab,
                                 SECTOR_METRICS: more.sector_metrics, LAP_DELTA: more.lap_delta,
                                 CORNER_METRICS: more.corner_metrics},
                       summary={**lap_summary, **more.summary})


def _lap_metrics(laps: pa.Table | None, speed: _Speed) -> tuple[pa.Table, dict[str, Any], set[int]]:
    if laps is None or laps.num_rows == 0:
        empty = _lap_table([], np.zeros(0, np.int64), np.zeros(0, np.int64))
        summary = {"lap_count": 0, "valid_lap_count": 0, "best_lap": None,
                   "best_lap_time_s": None, "mean_lap_time_s": None,
                   "median_lap_time_s": None, "distance_m": speed.distance(),
                   "max_speed_mps": float(speed.v.max()) if speed.v.size else None,
                   "lap_compare_available": False}
        return empty, summary, set()
    start, end = ts_micros(laps, "start_ts"), ts_micros(laps, "end_ts")
    times = column_f64(laps, "lap_time_s")
    valid = np.asarray(laps.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    numbers = [int(x) for x in laps.column("lap").to_pylist()]
    stats = speed.stats(start, end)
    # One lap distance: detect_laps' (speed integrated between the crossings), else the same
    # integral here (a laps table written before it carried one).
    driven = (column_f64(laps, "distance_m") if "distance_m" in laps.column_names
              else stats["avg"] * times)
    best_i = int(np.flatnonzero(valid)[np.argmin(times[valid])]) if valid.any() else None
    best_t = float(times[best_i]) if best_i is not None else None
    sigma = (column_f64(laps, "lap_time_sigma_s") if "lap_time_sigma_s" in laps.column_names
             else np.full(laps.num_rows, np.nan))
    # The rolling best: the best valid lap time up to and including each lap.
    rolling = np.minimum.accumulate(np.where(valid, times, np.inf))
    rows = [{
        "lap": numbers[i], "lap_time_s": float(times[i]),
        "delta_to_best_s": float(times[i] - best_t) if best_t is not None else None,
        "is_best": i == best_i, "valid": bool(valid[i]),
        "pit": bool(laps.column("pit")[i].as_py()) if "pit" in laps.column_names else False,
        "max_speed_mps": _num(stats["max"][i]), "avg_speed_mps": _num(stats["avg"][i]),
        "distance_m": _num(driven[i]), "lap_time_sigma_s": _num(sigma[i]),
        "rolling_best_s": _num(rolling[i]),
    } for i in range(laps.num_rows)]
    summary = {
        "lap_count": laps.num_rows, "valid_lap_count": int(valid.sum()),
        "best_lap": numbers[best_i] if best_i is not None else None,
        "best_lap_time_s": best_t,
        "mean_lap_time_s": float(times[valid].mean()) if valid.any() else None,
        "median_lap_time_s": float(np.median(times[valid])) if valid.any() else None,
        "distance_m": speed.distance(),
        "max_speed_mps": float(speed.v.max()) if speed.v.size else None,
        "lap_compare_available": int(valid.sum()) >= 2,
    }
    return _lap_table(rows, start, end), summary, {numbers[i] for i in np.flatnonzero(valid)}


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _lap_table(rows: list[dict[str, Any]], start: IntArray, end: IntArray) -> pa.Table:
    def col(key: str) -> list[Any]:
        return [r[key] for r in rows]

    times = {"start_ts": micros_to_ts(start), "end_ts": micros_to_ts(end)}
    data = {n: times[n] if n in times else col(n) for n in LAP_METRICS_SCHEMA.names}
    return pa.Table.from_pydict(data, schema=LAP_METRICS_SCHEMA)


def _segment_metrics(segs: pa.Table | None, speed: _Speed, valid_laps: set[int]) -> pa.Table:
    n = segs.num_rows if segs is not None else 0
    if segs is None or n == 0:
        return _segment_table(n=0, cols={})
    start, end = ts_micros(segs, "start_ts"), ts_micros(segs, "end_ts")
    kind = segs.column("kind").to_pylist()
    lap = segs.column("lap").to_pylist()
    apex = segs.column("apex_ts").cast(pa.int64()).to_pylist()
    stats = speed.stats(start, end)
    apex_speed = np.full(n, np.nan)
    has_apex = np.array([a is not None for a in apex])
    if has_apex.any():
        apex_speed[has_apex] = speed.at(np.array([a for a in apex if a is not None],
                                                 dtype=np.int64))
    ordinal: list[int | None] = [None] * n
    seen: Counter[tuple[Any, str]] = Counter()
    for i in range(n):
        if lap[i] is not None and kind[i] != "jump":
            seen[(lap[i], kind[i])] += 1
            ordinal[i] = seen[(lap[i], kind[i])]
    duration = (end - start) / 1e6
    delta = _segment_deltas(kind, lap, ordinal, duration, seen, valid_laps)
    return _segment_table(n=n, cols={
        "segment_id": segs.column("segment_id").to_pylist(), "kind": kind, "lap": lap,
        "lap_ordinal": ordinal, "start_ts": micros_to_ts(start), "end_ts": micros_to_ts(end),
        "duration_s": duration, "max_speed_mps": stats["max"], "avg_speed_mps": stats["avg"],
        "min_speed_mps": stats["min"], "apex_speed_mps": apex_speed, "delta_to_best_s": delta,
    })


def _segment_deltas(kind: list[str], lap: list[Any], ordinal: list[int | None],
                    duration: FloatArray, seen: Counter[tuple[Any, str]],
                    valid_laps: set[int]) -> FloatArray:
    """Duration minus the best duration of the same (kind, ordinal) over comparable laps."""
    usual: dict[str, int] = {}
    for k in ("corner", "straight"):
        counts = Counter(c for (lp, kk), c in seen.items() if kk == k and lp in valid_laps)
        if counts:
            usual[k] = counts.most_common(1)[0][0]
    comparable = [lap[i] is not None and usual.get(kind[i]) == seen[(lap[i], kind[i])]
                  for i in range(len(kind))]
    best: dict[tuple[str, int], float] = {}
    for i, ok in enumerate(comparable):
        o = ordinal[i]
        if ok and o is not None and lap[i] in valid_laps:
            key = (kind[i], o)
            best[key] = min(best.get(key, np.inf), float(duration[i]))
    out = np.full(len(kind), np.nan)
    for i, ok in enumerate(comparable):
        o = ordinal[i]
        if ok and o is not None and (kind[i], o) in best:
            out[i] = duration[i] - best[(kind[i], o)]
    return out


def _segment_table(*, n: int, cols: dict[str, Any]) -> pa.Table:
    def f64(key: str) -> pa.Array:
        vals = cols.get(key, np.zeros(n))
        return pa.array(np.asarray(vals, dtype=np.float64), from_pandas=True)

    return pa.table({
        "segment_id": pa.array(cols.get("segment_id", []), type=pa.int32()),
        "kind": pa.array(cols.get("kind", []), type=pa.string()),
        "lap": pa.array(cols.get("lap", []), type=pa.int32()),
        "lap_ordinal": pa.array(cols.get("lap_ordinal", []), type=pa.int32()),
        "start_ts": cols.get("start_ts", micros_to_ts(np.zeros(0, np.int64))),
        "end_ts": cols.get("end_ts", micros_to_ts(np.zeros(0, np.int64))),
        "duration_s": f64("duration_s"),
        "max_speed_mps": f64("max_speed_mps"),
        "avg_speed_mps": f64("avg_speed_mps"),
        "min_speed_mps": f64("min_speed_mps"),
        "apex_speed_mps": f64("apex_speed_mps"),
        "delta_to_best_s": f64("delta_to_best_s"),
    })
