"""Job ``detect_laps``: start/finish crossings, lap boundaries and pit laps.

Theory of operation
-------------------
Positions come from ``fused`` when fusion ran, else from ``gnss`` fixes, projected into a local
east/north plane.

1. **The line.** ``config["start_finish"] = {"lat1", "lon1", "lat2", "lon2"}`` is a segment
   across the track (make it span the pit lane too, as a timing line does); else the lines of
   a track (:func:`stages.batch.track_library.resolve`: ``config["track"]`` by name, or a saved
   or library track detected from where the session was driven). Without one, the
   line is found where the track *closes on itself*: walking forward from the first sample
   at ``stop_speed_mps`` or more (a runner too) in 25 m steps over the whole session, the
   first anchor the vehicle later passes again (within ``close_radius_m``, heading within
   45°, after at least ``min_loop_m``) closes a first loop; the line goes through that loop's
   fastest point that recurs too (a crossing at speed is timed best), perpendicular to the
   heading, ``auto_half_width_m`` each side. A line the moving vehicle crosses fewer than
   twice in one direction gives no lap (a ride that ends where it began passes its first
   fix once, and only at the end): the search goes on from the next anchor. No such anchor:
   the track does not repeat, and the stage reports no laps with reason
   ``TRACK_NOT_CLOSED`` - it never invents laps. ``NO_LINE_CROSSINGS`` is for a configured
   line crossed fewer than twice.
2. **Crossings.** A crossing is a sign change of the signed distance to the line between two
   samples, inside the segment, in the dominant direction. Its time comes from a least-squares
   fit of signed distance against *distance travelled* (the integral of the receiver's or the
   fused speed, :func:`~stages.batch.geo.travelled`): near a line the vehicle drives
   nearly straight, so signed distance is linear in distance travelled whatever the vehicle's
   acceleration, and a straight line through many fixes averages their noise. The fit window
   is *adaptive*: the widest of ±150, 100, 70, 50, 35 m of travel whose quadratic term would
   move a straight line's root by less than ``_FIT_BIAS_M`` (0.5 m) - wide on a straight (about
   ninety fixes at 10 Hz and 30 m/s), narrow where the path bends. The root, mapped back to a
   time through the distance travelled, is the crossing. Without speeds, or when no window
   qualifies, a quadratic in time over ``fit_window_s`` either side is used, and plain linear
   interpolation last. Crossings closer than ``min_lap_s`` to the previously accepted one are
   debounced.
2b. **Pass alignment.** A per-pass straight line can use only the straight part of the path:
   with the line in a 50 m bend that is about ±35 m, thirty fixes at 10 Hz. But the vehicle
   drives the same path on every lap, so with three or more passes that path (a cubic spline
   of east and north against distance travelled from the line) is fitted through the fixes
   of all passes, each shifted along it by its own offset, and each pass's offset is the mean
   along-path residual of its fixes within ±500 m of travel (four rounds). Errors of the
   shared path are common to every pass and cancel in lap times, so each crossing is placed
   with hundreds of fixes, bend or straight. Fixes farther across the path than its noise
   explains (three robust sigmas, at least 4 m: a pit lane) do not count, and a pass with
   more than a tenth of them keeps its own fit, as does every pass without distance
   travelled. On the synthetic circuits (10 Hz, 2 m of white noise):
   worst lap-time error 0.016 s with the line mid-bend of 50 and 90 m radius (0.037 s before),
   0.009 s on the main straight (0.021 s).
2c. **Uncertainty.** Every crossing carries a standard uncertainty: a per-pass fit's root
   standard error over the fixes' effective number (``n (1 - ρ) / (1 + ρ)``, ρ the residuals'
   lag-one autocorrelation) in metres of travel, over the speed there; an aligned pass's mean
   along-path residual's standard error plus the slow receiver error, measured across the path
   as the passes' mean offsets. A lap's or a sector's is its two crossings' combined. The
   aligned crossings of a line are then moved, together, onto the per-pass fits' mean: the
   shared path's local along-track error is common to every pass (nothing to a lap time, a
   bias to a sector time).
3. **Laps** run between consecutive accepted crossings (with ``config["finish"]``, a
   point-to-point stage: from each start crossing to the first finish crossing after it). A
   lap's ``distance_m`` is the distance travelled between its crossings (speed integrated
   over the lap time) - the same measure as ``lap_metrics.distance_m`` - not the length of
   the path through the fixes, which position noise lengthens (by about 30 % at 10 Hz and 2 m
   of noise).
4. **Pit laps.** Each lap's path is compared with up to five other laps (those closest to the
   median lap time); a stretch of at least ``pit_min_s`` whose (lower) median distance to them
   exceeds ``pit_deviation_m`` is off the racing line (``pit``). That takes three laps: two
   laps that run apart somewhere cannot tell which of them left the line, so neither did.
   Such a stretch in the lap's last quarter, or a line crossing more than ``pit_deviation_m``
   along the line from the usual one (a pit lane crossing the timing line), makes it
   ``pit_in``; in its first quarter, or starting at such a crossing, ``pit_out``. Time spent
   below ``stop_speed_mps`` for at least ``stop_min_s`` is ``stopped_s``. A lap is ``valid``
   when it has neither; only valid laps compete for best lap.

5. **Sectors.** The track's or ``config["sectors"]`` lines, else ``laps.default_sectors``
   sectors of about equal length (lines across the median valid lap at equal distances, each
   moved to the fastest point within ``_SECTOR_SLACK`` of the lap). Each line is timed like the
   start/finish line, on the motion thinned to 20 Hz; a lap that crosses every one once, in
   order, gets its sector times.

Produces datasets ``laps`` (see :func:`laps_table`) and ``sector_times``
(:func:`sector_times_table`) and a summary with ``lap_count``, ``reason`` (``None`` or
``NO_POSITION_DATA`` / ``TRACK_NOT_CLOSED`` / ``NO_LINE_CROSSINGS``), ``line``, ``finish``,
``track``, ``sector_lines``, ``sector_count``, ``source``, ``crossings``, ``debounced``,
``pit_laps``, ``laps_available``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from scipy.interpolate import make_lsq_spline
from scipy.ndimage import median_filter
from scipy.spatial import cKDTree

from schemas import error_codes as codes
from schemas.run_config import LapsConfig, RunConfig, StartFinish
from stages.batch import track_library
from stages.batch.contract import SessionStageError, StageInput, StageOutput, run_config
from stages.batch.geo import (
    FloatArray,
    LocalFrame,
    Motion,
    micros_to_ts,
    path_distance,
    travelled,
)
from stages.batch.lap_datasets import LAPS_SCHEMA, SECTOR_TIMES_SCHEMA

LAPS = "laps"
SECTOR_TIMES = "sector_times"
NO_POSITION_DATA = "NO_POSITION_DATA"
TRACK_NOT_CLOSED = "TRACK_NOT_CLOSED"
NO_LINE_CROSSINGS = "NO_LINE_CROSSINGS"

# Crossing fit (step 2): half-widths tried, widest first, in metres of travel; the largest
# shift a window's curvature may cause a straight-line root; fixes a fit needs at least.
_FIT_WINDOWS_M = (150.0, 100.0, 70.0, 50.0, 35.0)
_FIT_BIAS_M = 0.5
_FIT_MIN_POINTS = 8
# Pass alignment (step 2b): half-width of travel each pass contributes, the template's knot
# spacing (at least, in metres of travel; and in fixes of one pass), rounds, the distance
# across the path beyond which a fix is off it (at least; else three robust sigmas), and the
# share of a pass's fixes that must be on it (else the pass, a pit lane, keeps its own fit).
_ALIGN_HALF_M = 500.0
_ALIGN_KNOT_M = 12.0
_ALIGN_FIXES_PER_KNOT = 8
_ALIGN_ROUNDS = 4
_ALIGN_FIT_DT_S = 0.1
"""The shared path is fitted through at most one sample of a pass per this many seconds."""
_ALIGN_OFF_LINE_M = 4.0
_ALIGN_MIN_ON_PATH = 0.9
# Equal-distance sector lines (step 5) move to the fastest point within this share of the lap.
_SECTOR_SLACK = 0.08
# Sector lines are timed on the motion thinned to one sample per this many seconds: on a
# 60-minute 100 Hz session two lines cost 0.29 s at the full rate, 0.07 s thinned.
_SECTOR_FIT_DT_S = 0.1
_SECTOR_ROUNDS = 2
_SECTOR_TRIES = 12
"""Fastest points tried for an equal-distance sector line before its exact place."""
"""Pass-alignment rounds for a sector line (the start/finish line has four): on eight sector
lines of four synthetic sessions the times moved by at most 2e-8 s after the second round."""
# Found lines (step 1) rejected for too few crossings before the search gives up.
_AUTO_MAX_REJECTED = 40


@dataclass(frozen=True, kw_only=True)
class _Line:
    e1: float
    n1: float
    e2: float
    n2: float
    source: str
    up: bool | None = None
    """The direction it is timed in (signed distance rising); ``None``: the dominant one."""

    def signed_distance(self, e: FloatArray, n: FloatArray) -> FloatArray:
        de, dn = self.e2 - self.e1, self.n2 - self.n1
        return np.asarray((de * (n - self.n1) - dn * (e - self.e1)) / np.hypot(de, dn))

    def along(self, e: FloatArray, n: FloatArray) -> FloatArray:
        de, dn = self.e2 - self.e1, self.n2 - self.n1
        return np.asarray(((e - self.e1) * de + (n - self.n1) * dn) / (de * de + dn * dn))

    def passes(self, e: FloatArray, n: FloatArray) -> tuple[FloatArray, npt.NDArray[np.intp],
                                                            FloatArray, FloatArray]:
        """Where the path ``e``, ``n`` crosses the segment: the signed distance of every
        sample; and per crossing inside the segment, the sample before it, the fraction of the
        step to the crossing, and where along the line (0 to 1) it is."""
        s = self.signed_distance(e, n)
        idx = np.flatnonzero((s[:-1] < 0) != (s[1:] < 0))
        frac = s[idx] / (s[idx] - s[idx + 1])
        u = self.along(e[idx] + frac * (e[idx + 1] - e[idx]),
                       n[idx] + frac * (n[idx + 1] - n[idx]))
        ok = (u >= 0) & (u <= 1)
        return s, idx[ok], frac[ok], u[ok]


def run(inp: StageInput) -> StageOutput:
    """Detect laps (see the module docstring)."""
    config = run_config(inp.config)
    params = config.laps
    motion = Motion.from_datasets(inp.datasets)
    if motion is None:
        return _no_laps(NO_POSITION_DATA, None, None)
    frame = LocalFrame.around(motion.lat, motion.lon)
    e, n = frame.to_en(motion.lat, motion.lon)
    lines = _timing_lines(config, frame, motion, e, n)
    if lines is None:
        line = _auto_line(motion, e, n, params)
        if line is None:
            return _no_laps(TRACK_NOT_CLOSED, None, motion.source)
        lines = _Lines(start=line, finish=None, track=None, sectors=tuple(
            _configured_line(x, frame) for x in config.sectors))
    line = lines.start
    line_json = _line_json(line, frame)
    finish_json = _line_json(lines.finish, frame) if lines.finish is not None else None
    dist = travelled(motion.t, motion.speed)
    timing = _Timing(t=motion.t, dist=dist, e=e, n=n, p=params)
    starts = timing.crossings(line)
    if lines.finish is None:
        enough = starts.times.size >= 2
        ends = starts
    else:
        ends = timing.crossings(lines.finish)
        enough = bool(starts.times.size and ends.times.size)
    if not enough:
        # A found line crossed fewer than twice: the track does not repeat through it.
        reason = NO_LINE_CROSSINGS if line.source != "auto" else TRACK_NOT_CLOSED
        return _no_laps(reason, line_json, motion.source, crossings=int(starts.times.size),
                        finish=finish_json, track=lines.track)
    if lines.finish is None:
        laps = _laps(motion, dist, e, n, starts, params)
    else:
        laps = _stage_runs(motion, dist, starts, ends, params)
    if not laps:
        return _no_laps(NO_LINE_CROSSINGS, line_json, motion.source,
                        crossings=int(starts.times.size), finish=finish_json, track=lines.track)
    sector_lines = list(lines.sectors) or _equal_distance_lines(
        motion, dist, e, n, laps, params)
    sectors = _sector_times(timing.thinned(_SECTOR_FIT_DT_S), laps, sector_lines)
    t0 = int(motion.ts_us[0])
    pit = [int(x["lap"]) for x in laps if x["pit_in"] or x["pit_out"]]
    return StageOutput(datasets={LAPS: laps_table(t0, laps),
                                 SECTOR_TIMES: sector_times_table(t0, sectors)}, summary={
        "lap_count": len(laps), "reason": None, "laps_available": True, "line": line_json,
        "finish": finish_json, "track": lines.track,
        "sector_lines": [_line_json(x, frame) for x in sector_lines],
        "sector_count": len(sector_lines) + 1,
        "source": motion.source, "crossings": int(starts.times.size),
        "debounced": starts.debounced, "pit_laps": pit,
    })


def _no_laps(reason: str, line: dict[str, Any] | None, source: str | None,
             **extra: Any) -> StageOutput:
    return StageOutput(datasets={LAPS: laps_table(0, []), SECTOR_TIMES: sector_times_table(0, [])},
                       summary={"lap_count": 0, "reason": reason, "laps_available": False,
                                "line": line, "source": source, "pit_laps": [],
                                "sector_lines": [], "sector_count": 0, **extra})


def _timing_lines(config: RunConfig, frame: LocalFrame, m: Motion, e: FloatArray,
                  n: FloatArray) -> _Lines | None:
    """The lines of the configured, named or detected track (step 1 of the module docstring;
    ``None``: the line is to be found)."""
    # Detection looks at where the session was driven: ten samples a second are plenty.
    steps = np.diff(m.t)
    k = max(1, round(0.1 / float(np.median(steps)))) if steps.size and np.median(steps) > 0 else 1
    track = track_library.resolve(config, m.lat[::k], m.lon[::k], m.speed[::k])
    if track is None:
        return None
    source = "config" if track.source == "config" else "track"
    return _Lines(
        start=_configured_line(track.start_finish, frame, source),
        finish=(_configured_line(track.finish, frame, source)
                if track.finish is not None else None),
        sectors=tuple(_configured_line(x, frame, source) for x in track.sectors),
        track=None if track.source == "config" else {
            "name": track.name, "source": track.source, "key": track.key,
            "reference": track.reference})


def _configured_line(cfg: StartFinish, frame: LocalFrame, source: str = "config") -> _Line:
    vals = [cfg.lat1, cfg.lon1, cfg.lat2, cfg.lon2]  # in range: the run config checked them
    e, n = frame.to_en(np.array([vals[0], vals[2]]), np.array([vals[1], vals[3]]))
    if np.hypot(e[1] - e[0], n[1] - n[0]) < 1.0:
        raise SessionStageError("start_finish segment shorter than 1 m",
                                code=codes.INVALID_START_FINISH)
    return _Line(e1=float(e[0]), n1=float(n[0]), e2=float(e[1]), n2=float(n[1]), source=source)


def _line_json(line: _Line, frame: LocalFrame) -> dict[str, Any]:
    lat, lon = frame.to_latlon(np.array([line.e1, line.e2]), np.array([line.n1, line.n2]))
    return {"lat1": float(lat[0]), "lon1": float(lon[0]), "lat2": float(lat[1]),
            "lon2": float(lon[1]), "source": line.source}


def _auto_line(m: Motion, e: FloatArray, n: FloatArray, p: LapsConfig) -> _Line | None:
    """A line where the path comes back on itself and that the moving vehicle crosses at
    least twice (None when there is none: step 1 of the module docstring)."""
    d = path_distance(e, n)
    moving = np.flatnonzero(np.nan_to_num(m.speed) >= p.stop_speed_mps)
    if moving.size == 0 or d[-1] < p.min_loop_m:
        return None
    heading = _heading_at(m.t, e, n)
    step = np.searchsorted(d, np.arange(0.0, d[-1], 1.0))  # ~1 m spacing for the search
    near = _Near(step=step, e=e, n=n, d=d, heading=heading,
                 tree=cKDTree(np.column_stack([e[step], n[step]])), p=p)
    d0 = d[moving[0]]
    rejected = 0
    for anchor_d in np.arange(d0, d[-1] - p.min_loop_m, 25.0):
        a = int(np.searchsorted(d, anchor_d))
        back = near.returns(a)
        if back is None:
            continue
        line = _line_at(_fastest(a, back, m.speed, near), e, n, heading, p)
        if _moving_crossings(line, m, e, n, p) >= 2:
            return line
        rejected += 1  # e.g. through the first fix of a ride that ends where it began
        if rejected >= _AUTO_MAX_REJECTED:
            break
    return None


@dataclass(frozen=True, kw_only=True)
class _Near:
    """Later passes near a sample, found among the ~1 m spaced samples ``step``."""

    step: npt.NDArray[np.intp]
    e: FloatArray
    n: FloatArray
    d: FloatArray
    heading: FloatArray
    tree: Any  # cKDTree over the ``step`` samples
    p: LapsConfig

    def returns(self, a: int) -> int | None:
        """Index of the first later pass near sample ``a`` in the same direction, if any."""
        found = self.tree.query_ball_point([self.e[a], self.n[a]], self.p.close_radius_m)
        hits = self.step[np.asarray(found, dtype=np.intp)]
        far = hits[self.d[hits] >= self.d[a] + self.p.min_loop_m]
        turn = np.angle(np.exp(1j * (self.heading[far] - self.heading[a])))
        same = np.sort(far[np.abs(turn) < np.pi / 4])
        return int(same[0]) if same.size else None


def _fastest(a: int, back: int, speed: FloatArray, near: _Near) -> int:
    """The fastest sample of the first loop that recurs too: crossings at speed time best."""
    loop = near.step[(near.step >= a) & (near.step < back)]
    for i in loop[np.argsort(-np.nan_to_num(speed[loop]), kind="stable")][:50].tolist():
        if near.returns(i) is not None:
            return int(i)
    return a


def _moving_crossings(line: _Line, m: Motion, e: FloatArray, n: FloatArray,
                      p: LapsConfig) -> int:
    """How many times the vehicle, moving, crosses ``line`` in its dominant direction
    (crossings closer than ``min_lap_s`` count once): a found line needs two for a lap."""
    s, idx, _, _ = line.passes(e, n)
    idx = idx[np.nan_to_num(np.minimum(m.speed[idx], m.speed[idx + 1])) >= p.stop_speed_mps]
    if idx.size < 2:
        return int(idx.size)
    up = s[idx + 1] > s[idx]
    idx = idx[up] if up.sum() >= (~up).sum() else idx[~up]
    times = m.t[idx]
    return 1 + int(np.sum(np.diff(times) >= p.min_lap_s)) if times.size else 0


def _line_at(a: int, e: FloatArray, n: FloatArray, heading: FloatArray, p: LapsConfig) -> _Line:
    ne, nn = -np.sin(heading[a]), np.cos(heading[a])
    w = p.auto_half_width_m
    return _Line(e1=float(e[a] + w * ne), n1=float(n[a] + w * nn),
                 e2=float(e[a] - w * ne), n2=float(n[a] - w * nn), source="auto")


def _heading_at(t: FloatArray, e: FloatArray, n: FloatArray, span_s: float = 0.5,
                at: npt.NDArray[np.intp] | None = None) -> FloatArray:
    """Direction of travel between the positions ``span_s`` before and after each sample (a
    time baseline: tens of metres at speed, so GNSS noise barely tilts it); only at the
    samples ``at`` when given."""
    tc = t if at is None else t[at]
    lo = np.clip(np.searchsorted(t, tc - span_s), 0, t.size - 1)
    hi = np.clip(np.searchsorted(t, tc + span_s), 0, t.size - 1)
    return np.arctan2(n[hi] - n[lo], e[hi] - e[lo])


@dataclass(frozen=True, kw_only=True)
class _Cross:
    """A line's accepted crossings: times (s), where along the line (m from its first end),
    each time's standard uncertainty (s), and how many crossings were debounced."""

    times: FloatArray
    offsets: FloatArray
    sigmas: FloatArray
    debounced: int


@dataclass(frozen=True, kw_only=True)
class _Lines:
    """The lines a session is timed on: start (and finish, when it is a circuit), an optional
    separate finish line (a point-to-point stage), sector lines in driving order, and the
    track they come from (``None``: configured or found)."""

    start: _Line
    finish: _Line | None
    sectors: tuple[_Line, ...]
    track: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class _Timing:
    """One session's motion in the local plane, for timing any line across it."""

    t: FloatArray
    dist: FloatArray
    e: FloatArray
    n: FloatArray
    p: LapsConfig

    def thinned(self, dt_s: float) -> _Timing:
        """The same motion at most one sample per ``dt_s`` (a fused 100 Hz track's samples
        interpolate its 10 Hz fixes: thinning them keeps what a fit can learn)."""
        steps = np.diff(self.t)
        dt = float(np.median(steps)) if steps.size else 0.0
        k = max(1, round(dt_s / dt)) if dt > 0 else 1
        if k == 1:
            return self
        return _Timing(t=self.t[::k], dist=self.dist[::k], e=self.e[::k], n=self.n[::k],
                       p=self.p)

    def speeds(self, tc: FloatArray) -> FloatArray:
        """Speed (m/s) at the times ``tc`` from the distance travelled over ±0.1 s, at least
        1 m/s (a crawl's speed would turn any position error into an endless time)."""
        if not np.isfinite(self.dist).all():
            return np.ones(tc.size)
        d = np.interp(np.concatenate([tc - 0.1, tc + 0.1]), self.t, self.dist)
        return np.asarray(np.maximum((d[tc.size:] - d[:tc.size]) / 0.2, 1.0), dtype=np.float64)

    def crossings(self, line: _Line, rounds: int = _ALIGN_ROUNDS) -> _Cross:
        """Refined crossing times of ``line`` in its dominant direction, debounced (step 2 of
        the module docstring), with their uncertainties (step 2c)."""
        t, e, n, p = self.t, self.e, self.n, self.p
        s, idx, frac, u = line.passes(e, n)
        if idx.size == 0:
            return _Cross(times=np.zeros(0), offsets=np.zeros(0), sigmas=np.zeros(0),
                          debounced=0)
        up = s[idx + 1] > s[idx]
        if line.up is not None:  # a sector line found on the reference lap: its direction
            direction = line.up
        else:
            direction = (bool(up.sum() > (~up).sum()) if up.sum() != (~up).sum()
                         else bool(up[0]))
        idx, frac, u = idx[up == direction], frac[up == direction], u[up == direction]
        raw = t[idx] + frac * (t[idx + 1] - t[idx])
        step = (t[idx + 1] - t[idx]) / np.sqrt(12.0)  # interpolation alone: uniform error
        length = float(np.hypot(line.e2 - line.e1, line.n2 - line.n1))
        along = line.along(e, n) * length
        # Fits by distance need a finite distance travelled: checked once here, not once per
        # pass over the whole track.
        by_distance = bool(np.isfinite(self.dist).all())
        fits = [(by_distance and _refine_by_distance(t, self.dist, s, along, tc))
                or _refine(t, s, along, tc, uc * length, p.fit_window_s, sc)
                for tc, uc, sc in zip(raw.tolist(), u.tolist(), step.tolist(), strict=True)]
        kept: list[tuple[float, float, float]] = []
        for tc, ac, sm in fits:
            if not kept or tc - kept[-1][0] >= p.min_lap_s:
                kept.append((tc, ac, sm))
        arr = np.asarray(kept).reshape(-1, 3)
        # A fit's uncertainty is in metres of travel (or seconds, for the time fallback).
        sig = np.where(arr[:, 2] < 0, arr[:, 2], arr[:, 2] / self.speeds(arr[:, 0]))
        fitted = arr[:, 0]
        times, sig, used = _align_passes(self, line, fitted, np.abs(sig), rounds)
        if used.sum() >= 3:
            # The shared path places every pass relative to the others; where along the track
            # it puts the line is off by its local along-track error, common to every pass:
            # nothing to a lap time, but a bias to a sector time. The per-pass fits are
            # unbiased, so the aligned times are moved by their mean difference to them.
            gap = fitted[used] - times[used]
            times = np.where(used, times + float(np.mean(gap)), times)
            common = float(np.std(gap) / np.sqrt(gap.size))
            sig = np.where(used, np.hypot(sig, common), sig)
        return _Cross(times=times, offsets=arr[:, 1], sigmas=sig,
                      debounced=len(fits) - len(kept))


def _effective_n(res: FloatArray) -> float:
    """How many independent samples a residual series is worth: ``n (1 - ρ) / (1 + ρ)`` for
    its lag-one autocorrelation ρ (a fused or slowly wandering track is far from white)."""
    if res.size < 3:
        return float(max(res.size, 1))
    r = res - res.mean()
    den = float(np.dot(r, r))
    rho = float(np.dot(r[:-1], r[1:]) / den) if den > 0 else 0.0
    rho = min(max(rho, 0.0), 0.999)
    return max(1.0, res.size * (1.0 - rho) / (1.0 + rho))


def _align_passes(tm: _Timing, line: _Line, times: FloatArray, sigmas: FloatArray,
                  rounds: int = _ALIGN_ROUNDS,
                  ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Crossing times refined by aligning every pass with one shared path (step 2b of the
    module docstring), their uncertainties (step 2c) and which passes were aligned; the
    per-pass ``times`` and ``sigmas`` stand where that cannot be done."""
    t, dist, e, n = tm.t, tm.dist, tm.e, tm.n
    none = np.zeros(times.size, dtype=bool)
    if times.size < 3 or not np.isfinite(dist).all():
        return times, sigmas, none
    a = np.interp(times, t, dist)  # distance travelled at each pass's crossing
    half = _ALIGN_HALF_M
    windows = [slice(*np.searchsorted(dist, [x - half, x + half], side="left").tolist())
               for x in a.tolist()]
    pts = [np.column_stack([e[w], n[w]]) for w in windows]
    use = np.ones(times.size, dtype=bool)
    path = None
    # The shared path is fitted through fixes at most every _ALIGN_FIT_DT_S: a fused track's
    # 100 Hz samples interpolate its 10 Hz fixes and add nothing to the path's shape, while the
    # fit's cost grows with them (0.28 of detect_laps' 0.52 s on a 60-minute session). Every
    # sample still places its pass below.
    steps = np.diff(t)
    dt = float(np.median(steps)) if steps.size else 0.0
    stride = max(1, round(_ALIGN_FIT_DT_S / dt)) if dt > 0 else 1
    fit_windows = [slice(w.start, w.stop, stride) for w in windows]
    fit_pts = [p[::stride] for p in pts]
    spread = np.zeros(times.size)
    for _ in range(rounds):
        path = _shared_path(dist, fit_windows, fit_pts, a, use)
        if path is None:
            return times, sigmas, none
        tangent = path.derivative()
        along: list[FloatArray] = []
        across: list[FloatArray] = []
        sided: list[FloatArray] = []
        for k, (w, p) in enumerate(zip(windows, pts, strict=True)):
            u = dist[w] - a[k]
            inside = np.abs(u) <= half
            pos, tan = path(u[inside]), tangent(u[inside])
            tan /= np.linalg.norm(tan, axis=1, keepdims=True)
            res = p[inside] - pos
            along.append(np.einsum("ij,ij->i", res, tan))
            sided.append(res[:, 0] * tan[:, 1] - res[:, 1] * tan[:, 0])
            across.append(np.abs(sided[-1]))
        # Fixes farther across the path than its noise explains (a pit lane) do not place
        # their pass; a pass with many of them is off the usual path and keeps its own fit.
        usual = np.concatenate([x for k, x in enumerate(across) if use[k]])
        gate = max(_ALIGN_OFF_LINE_M, 3.0 * 1.4826 * float(np.median(usual)))
        shift = np.zeros(times.size)
        offset = np.zeros(times.size)
        for k in range(times.size):
            on = across[k] <= gate
            if on.sum() < _FIT_MIN_POINTS or on.mean() < _ALIGN_MIN_ON_PATH:
                use[k] = False
                continue
            shift[k] = float(np.mean(along[k][on]))
            spread[k] = float(np.std(along[k][on]) / np.sqrt(_effective_n(along[k][on])))
            # The pass's mean offset across the path: slow receiver error (it does not
            # average out within a pass) shows there as much as along it.
            across_k = sided[k][on]
            offset[k] = float(np.mean(across_k)) ** 2 - float(
                np.var(across_k) / _effective_n(across_k))
        if use.sum() < 3:
            return times, sigmas, none
        a = np.where(use, a - shift, a)
    assert path is not None
    grid = np.linspace(-half, half, int(2 * half / 0.05) + 1)
    pe, pn = path(grid).T
    sd = line.signed_distance(pe, pn)
    sign = np.flatnonzero((sd[:-1] < 0) != (sd[1:] < 0))
    if sign.size == 0:
        return times, sigmas, none
    i = int(sign[np.argmin(np.abs(grid[sign]))])
    root = float(grid[i] + sd[i] / (sd[i] - sd[i + 1]) * (grid[i + 1] - grid[i]))
    aligned = np.interp(a + root, dist, t)
    # An aligned pass is placed by the mean along-path residual of its fixes: its standard
    # error (over the fixes' effective number) and the slow error no pass averages, measured
    # across the path over all passes (step 2c), in time at the pass's speed.
    slow = max(float(np.mean(offset[use])), 0.0)
    speed = tm.speeds(aligned)
    sigma = np.sqrt(spread**2 + slow) / speed
    return (np.asarray(np.where(use, aligned, times), dtype=np.float64),
            np.asarray(np.where(use, sigma, sigmas), dtype=np.float64), use)


def _shared_path(dist: FloatArray, windows: list[slice], pts: list[FloatArray],
                 a: FloatArray, use: npt.NDArray[np.bool_]) -> Any:
    """A cubic least-squares spline of (east, north) against distance from the line, through
    the fixes of the passes in ``use`` (None when they are too sparse for its knots)."""
    half = _ALIGN_HALF_M
    u = np.concatenate([dist[w] - a[k] for k, w in enumerate(windows) if use[k]])
    xy = np.concatenate([p for k, p in enumerate(pts) if use[k]])
    keep = np.abs(u) <= half
    u, xy = u[keep], xy[keep]
    order = np.argsort(u, kind="stable")
    u, xy = u[order], xy[order]
    if u.size < 16:
        return None
    # Knots far enough apart that each interval holds several fixes of every pass.
    step = float(np.median(np.concatenate([np.diff(dist[w]) for w in windows])))
    spacing = max(_ALIGN_KNOT_M, _ALIGN_FIXES_PER_KNOT * step)
    inner = np.arange(-half + spacing, half - spacing / 2, spacing)
    knots = np.concatenate(([u[0]] * 4, inner[(inner > u[0]) & (inner < u[-1])], [u[-1]] * 4))
    try:
        return make_lsq_spline(u, xy, knots, k=3)
    except (ValueError, np.linalg.LinAlgError):
        return None


def _refine_by_distance(t: FloatArray, dist: FloatArray, s: FloatArray, a: FloatArray,
                        tc: float) -> tuple[float, float, float] | None:
    """Crossing time and along-line position from straight-line fits of signed distance and
    along-line position against distance travelled, in the widest window that is straight
    enough (step 2 of the module docstring), and the root's standard error in metres of
    travel; ``None`` when no window qualifies. ``dist`` must be finite (the caller checks it
    once for all its passes)."""
    dc = float(np.interp(tc, t, dist))
    for half in _FIT_WINDOWS_M:
        lo, hi = np.searchsorted(dist, [dc - half, dc + half], side="left")
        if hi - lo < _FIT_MIN_POINTS:
            continue
        x = dist[lo:hi] - dc
        c2, c1, _ = np.polyfit(x, s[lo:hi], 2)
        b1, b0 = np.polyfit(x, s[lo:hi], 1)
        # The root shift a quadratic term c2 causes in a straight-line fit: c2 * mean(x^2) / c1.
        if abs(b1) < 1e-6 or abs(c2) * float(np.mean(x * x)) >= _FIT_BIAS_M * abs(c1):
            continue
        root = -b0 / b1
        if abs(root) > half:
            continue
        a1, a0 = np.polyfit(x, a[lo:hi], 1)
        res = s[lo:hi] - (b0 + b1 * x)
        m = x.size
        sxx = float(np.sum((x - x.mean()) ** 2))
        var = (float(np.sum(res * res)) / max(m - 2, 1) / (b1 * b1)
               * (1.0 / m + (root - x.mean()) ** 2 / sxx) * m / _effective_n(res))
        return float(np.interp(dc + root, dist, t)), float(a0 + a1 * root), float(np.sqrt(var))
    return None


def _refine(t: FloatArray, s: FloatArray, a: FloatArray, tc: float, ac: float,
            window: float, step_sigma: float) -> tuple[float, float, float]:
    """The fallback fit around ``tc`` in time: the root of a quadratic in signed distance and
    a straight line in along-line position (the raw interpolation ``(tc, ac)`` last, whose
    uncertainty is ``step_sigma``). Uncertainties in seconds come back negated, to tell them
    from :func:`_refine_by_distance`'s metres."""
    lo, hi = np.searchsorted(t, [tc - window, tc + window])
    if hi - lo < 5:
        return tc, ac, -step_sigma
    tau = t[lo:hi] - tc
    c2, c1, c0 = np.polyfit(tau, s[lo:hi], 2)
    roots = np.roots([c2, c1, c0]) if abs(c2) > 1e-12 else np.array([-c0 / c1])
    real = roots[np.isreal(roots)].real
    real = real[np.abs(real) <= window]
    if not real.size:
        return tc, ac, -step_sigma
    root = float(real[np.argmin(np.abs(real))])
    b1, b0 = np.polyfit(tau, a[lo:hi], 1)
    res = s[lo:hi] - np.polyval([c2, c1, c0], tau)
    slope = abs(c1 + 2.0 * c2 * root)
    sigma = (float(np.std(res)) / max(slope, 1e-6) / np.sqrt(_effective_n(res))
             if slope > 0 else step_sigma)
    return tc + root, float(b0 + b1 * root), -max(sigma, 1e-6)


def _laps(m: Motion, dist: FloatArray, e: FloatArray, n: FloatArray, starts: _Cross,
          p: LapsConfig) -> list[dict[str, Any]]:
    cross, offsets, sig = starts.times, starts.offsets, starts.sigmas
    d = path_distance(e, n)
    spans = [np.searchsorted(m.t, [a, b]) for a, b in pairwise(cross)]
    times = np.diff(cross)
    offline = _offline_runs(m.t, e, n, d, spans, times, p)
    # A crossing far along the line from the usual one is the pit lane crossing the line.
    pit_cross = np.abs(offsets - np.median(offsets)) > p.pit_deviation_m
    out = []
    for k, (lo, hi) in enumerate(spans):
        a, b = float(cross[k]), float(cross[k + 1])
        runs, quarter = offline[k], 0.25 * (b - a)
        pit_in = bool(pit_cross[k + 1]) or any(r1 >= b - quarter for _, r1 in runs)
        pit_out = bool(pit_cross[k]) or any(r0 <= a + quarter for r0, _ in runs)
        pit = pit_in or pit_out or bool(runs)
        stopped = _stopped_s(m.t[lo:hi], m.speed[lo:hi], p)
        driven = float(np.interp(b, m.t, dist) - np.interp(a, m.t, dist))
        out.append({
            "lap": k + 1, "start_s": a, "end_s": b, "lap_time_s": b - a,
            "distance_m": driven if np.isfinite(driven) else None,
            "pit_in": pit_in, "pit_out": pit_out, "pit": pit,
            "stopped_s": stopped, "valid": not pit and stopped == 0.0,
            "lap_time_sigma_s": float(np.hypot(sig[k], sig[k + 1])),
            "start_sigma_s": float(sig[k]), "end_sigma_s": float(sig[k + 1]),
        })
    return out


def _stage_runs(m: Motion, dist: FloatArray, starts: _Cross, ends: _Cross,
                p: LapsConfig) -> list[dict[str, Any]]:
    """Runs of a point-to-point stage: each start crossing to the first finish crossing after
    it, before the next start (a run abandoned before the finish has no time)."""
    out: list[dict[str, Any]] = []
    nxt = np.append(starts.times[1:], np.inf)
    for k, a in enumerate(starts.times.tolist()):
        j = int(np.searchsorted(ends.times, a, side="right"))
        if j >= ends.times.size or ends.times[j] >= nxt[k]:
            continue
        b = float(ends.times[j])
        lo, hi = np.searchsorted(m.t, [a, b])
        stopped = _stopped_s(m.t[lo:hi], m.speed[lo:hi], p)
        driven = float(np.interp(b, m.t, dist) - np.interp(a, m.t, dist))
        out.append({
            "lap": len(out) + 1, "start_s": a, "end_s": b, "lap_time_s": b - a,
            "distance_m": driven if np.isfinite(driven) else None,
            "pit_in": False, "pit_out": False, "pit": False, "stopped_s": stopped,
            "valid": stopped == 0.0,
            "lap_time_sigma_s": float(np.hypot(starts.sigmas[k], ends.sigmas[j])),
            "start_sigma_s": float(starts.sigmas[k]), "end_sigma_s": float(ends.sigmas[j]),
        })
    return out


def _equal_distance_lines(m: Motion, dist: FloatArray, e: FloatArray, n: FloatArray,
                          laps: list[dict[str, Any]], p: LapsConfig) -> list[_Line]:
    """``default_sectors - 1`` lines across the track that split the median valid lap (any lap
    when none is valid) into sectors of about equal length: each at the fastest point within
    ``_SECTOR_SLACK`` of the lap's length around its equal-distance place (a crossing at speed
    is timed best: a position error of 0.3 m is 0.03 s at 10 m/s, 0.006 s at 50 m/s),
    perpendicular to the direction of travel there."""
    if p.default_sectors < 2 or not np.isfinite(dist).all():
        return []
    pool = [x for x in laps if x["valid"]] or laps
    ref = sorted(pool, key=lambda x: x["lap_time_s"])[(len(pool) - 1) // 2]
    d0, d1 = np.interp([ref["start_s"], ref["end_s"]], m.t, dist)
    speed = np.nan_to_num(m.speed)
    slack = _SECTOR_SLACK * (d1 - d0)
    a, b = np.searchsorted(m.t, [ref["start_s"], ref["end_s"]])
    out: list[_Line] = []
    for k in range(1, p.default_sectors):
        mid = d0 + (d1 - d0) * k / p.default_sectors
        lo, hi = np.searchsorted(dist, [mid - slack, mid + slack])
        # Fastest first; a line the reference lap does not cross exactly once, well inside
        # the lap (a loop's point that is also where the lap starts, an out-and-back road
        # passed twice), is no sector line: the next fastest point is tried.
        order = lo + np.argsort(-speed[lo:hi], kind="stable")[:_SECTOR_TRIES]
        for i in [*order.tolist(), int(np.searchsorted(dist, mid))]:
            i = min(i, m.t.size - 1)
            h = float(_heading_at(m.t, e, n, at=np.array([i], dtype=np.intp))[0])
            w, ne, nn = p.auto_half_width_m, -np.sin(h), np.cos(h)
            line = _Line(e1=float(e[i] + w * ne), n1=float(n[i] + w * nn),
                         e2=float(e[i] - w * ne), n2=float(n[i] - w * nn), source="auto")
            up = _crossed_once(line, e[a:b], n[a:b])
            if up is not None:
                out.append(_Line(e1=line.e1, n1=line.n1, e2=line.e2, n2=line.n2,
                                 source="auto", up=up))
                break
    return out


def _crossed_once(line: _Line, e: FloatArray, n: FloatArray) -> bool | None:
    """The direction (signed distance rising) the path ``e``, ``n`` crosses the segment
    ``line`` in when it does so exactly once, not in its first or last tenth; else ``None``."""
    s, idx, _, _ = line.passes(e, n)
    edge = max(1, e.size // 10)
    if idx.size != 1 or not edge <= int(idx[0]) < e.size - edge:
        return None
    return bool(s[idx[0] + 1] > s[idx[0]])


def _sector_times(timing: _Timing, laps: list[dict[str, Any]],
                  lines: list[_Line]) -> list[dict[str, Any]]:
    """Per lap, the time from each timing line to the next (start, sector lines in order,
    finish) and its uncertainty. A lap that does not cross every sector line once, in order,
    has no sector times (a pit lane that bypasses one, a line badly placed)."""
    if not lines:
        return []
    crossed = [timing.crossings(line, _SECTOR_ROUNDS) for line in lines]
    out: list[dict[str, Any]] = []
    for lap in laps:
        a, b = lap["start_s"], lap["end_s"]
        marks = [(a, lap.get("start_sigma_s", 0.0))]
        for c in crossed:
            inside = np.flatnonzero((c.times > a) & (c.times < b))
            if inside.size != 1:
                break
            marks.append((float(c.times[inside[0]]), float(c.sigmas[inside[0]])))
        else:
            marks.append((b, lap.get("end_sigma_s", 0.0)))
            if all(x[0] < y[0] for x, y in pairwise(marks)):
                out += [{"lap": lap["lap"], "sector": k + 1, "start_s": x[0], "end_s": y[0],
                         "time_s": y[0] - x[0], "sigma_s": float(np.hypot(x[1], y[1]))}
                        for k, (x, y) in enumerate(pairwise(marks))]
    return out


def _offline_runs(t: FloatArray, e: FloatArray, n: FloatArray, d: FloatArray,
                  spans: list[npt.NDArray[np.intp]], times: FloatArray,
                  p: LapsConfig) -> list[list[tuple[float, float]]]:
    """Per lap, the (start, end) times of stretches away from the other laps' paths.

    Needs three laps: with two, a stretch where they run apart (two loops of a run a few
    metres apart) cannot be put on either, so neither is called off the line."""
    if len(spans) < 3:
        return [[] for _ in spans]
    trees = []
    for lo, hi in spans:  # references decimated to ~1 m so slow and fast laps weigh alike
        sel = lo + np.flatnonzero(np.diff(np.floor(d[lo:hi]), prepend=-1.0) > 0)
        trees.append(cKDTree(np.column_stack([e[sel], n[sel]])))
    rate = 1.0 / max(float(np.median(np.diff(t))), 1e-3)
    every = max(1, round(rate / 10.0))  # query at ~10 Hz
    order = np.argsort(np.abs(times - np.median(times)), kind="stable")
    out = []
    for k, (lo, hi) in enumerate(spans):
        sel = np.arange(lo, hi, every)
        refs = [j for j in order.tolist() if j != k][:5]
        q = np.column_stack([e[sel], n[sel]])
        # Lower median over the references: off the line only when most other laps are far
        # (with two references, both), so one other pit lap cannot make a clean lap look off.
        # Distances past the threshold (and a hair's margin) come back as inf, so the search
        # stops there: only which side of the threshold a distance lies on is used, and
        # sorting, the median filter's order statistic and the comparison all keep that
        # side, so the result is the same (with the check above, 0.49-0.51 -> 0.46-0.48 s of
        # the stage's CPU on bench/lap_analysis.py's session).
        bound = p.pit_deviation_m * (1 + 1e-9) + 1e-9
        dist = np.sort(np.stack([trees[j].query(q, distance_upper_bound=bound)[0]
                                 for j in refs]), axis=0)
        dist = median_filter(dist[(len(refs) - 1) // 2], size=9, mode="nearest")
        out.append(_runs(t[sel], dist > p.pit_deviation_m, p.pit_min_s))
    return out


def _runs(t: FloatArray, flag: npt.NDArray[np.bool_], min_s: float,
          bridge_s: float = 1.0) -> list[tuple[float, float]]:
    """(start, end) times of flagged stretches at least ``min_s`` long; flagged stretches
    less than ``bridge_s`` apart are one (noise must not split a pit lane visit)."""
    if not flag.any():
        return []
    edges = np.diff(np.concatenate(([0], flag.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    merged: list[list[float]] = []
    for a, b in zip(t[starts].tolist(), t[ends].tolist(), strict=True):
        if merged and a - merged[-1][1] < bridge_s:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged if b - a >= min_s]


def _stopped_s(t: FloatArray, speed: FloatArray, p: LapsConfig) -> float:
    runs = _runs(t, np.nan_to_num(speed, nan=np.inf) < p.stop_speed_mps, p.stop_min_s, 0.0)
    return float(sum(b - a for a, b in runs))


def sector_times_table(t0_us: int, rows: list[dict[str, Any]]) -> pa.Table:
    """The ``sector_times`` dataset: one row per lap and sector (see :func:`_sector_times`)."""
    start = np.array([t0_us + round(x["start_s"] * 1e6) for x in rows], dtype=np.int64)
    end = np.array([t0_us + round(x["end_s"] * 1e6) for x in rows], dtype=np.int64)
    return pa.Table.from_pydict({
        "lap": [x["lap"] for x in rows], "sector": [x["sector"] for x in rows],
        "start_ts": micros_to_ts(start), "end_ts": micros_to_ts(end),
        "time_s": [x["time_s"] for x in rows], "sigma_s": [x["sigma_s"] for x in rows],
    }, schema=SECTOR_TIMES_SCHEMA)


def laps_table(t0_us: int, laps: list[dict[str, Any]]) -> pa.Table:
    """The ``laps`` dataset: one row per complete lap (times as canonical timestamps)."""
    def col(key: str) -> list[Any]:
        return [x.get(key) for x in laps]

    start = np.array([t0_us + round(x["start_s"] * 1e6) for x in laps], dtype=np.int64)
    end = np.array([t0_us + round(x["end_s"] * 1e6) for x in laps], dtype=np.int64)
    times = {"start_ts": micros_to_ts(start), "end_ts": micros_to_ts(end)}
    data = {n: times[n] if n in times else col(n) for n in LAPS_SCHEMA.names}
    return pa.Table.from_pydict(data, schema=LAPS_SCHEMA)
