"""Ground truth of a synthetic session (laps, corners, jumps, true positions)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from stages.batch.geo import FloatArray, LocalFrame
from stages.batch.synth.motion import LEAD_IN_M, Kinematics
from stages.batch.synth.track import Track


@dataclass(frozen=True, kw_only=True)
class TruthLap:
    """One complete lap: line crossing times in seconds since the session start."""

    lap: int
    start_s: float
    end_s: float
    lap_time_s: float
    distance_m: float  # driven between the two crossings (the track's length)
    pit_in: bool
    pit_out: bool


@dataclass(frozen=True, kw_only=True)
class TruthCorner:
    """One pass through one corner (times in seconds since the session start)."""

    corner: int
    lap: int | None
    start_s: float
    apex_s: float
    end_s: float
    direction: str
    radius_m: float
    angle_deg: float
    min_speed_mps: float  # the lowest true speed between start and end (the apex speed)


@dataclass(frozen=True, kw_only=True)
class TruthJump:
    """One jump: take-off and landing (seconds since the session start)."""

    jump: int
    lap: int | None
    takeoff_s: float
    landing_s: float
    airtime_s: float
    landing_peak_mps2: float


@dataclass(frozen=True, kw_only=True)
class SyntheticTruth:
    """Ground truth of a synthetic session; arrays are true positions at sensor times."""

    start: datetime
    closed: bool
    flat: bool
    frame: LocalFrame
    laps: tuple[TruthLap, ...]
    corners: tuple[TruthCorner, ...]
    jumps: tuple[TruthJump, ...]
    start_finish: dict[str, float] | None
    duration_s: float
    imu_t: FloatArray = field(repr=False)
    imu_e: FloatArray = field(repr=False)
    imu_n: FloatArray = field(repr=False)
    gnss_t: FloatArray = field(repr=False)
    gnss_e: FloatArray = field(repr=False)
    gnss_n: FloatArray = field(repr=False)

    def crossing_times(self, line: dict[str, float]) -> FloatArray:
        """True times (s since start) the vehicle crosses the segment ``line`` (lat1..lon2)."""
        e1, n1 = self.frame.to_en(np.array([line["lat1"]]), np.array([line["lon1"]]))
        e2, n2 = self.frame.to_en(np.array([line["lat2"]]), np.array([line["lon2"]]))
        de, dn = float(e2[0] - e1[0]), float(n2[0] - n1[0])
        side = de * (self.imu_n - n1[0]) - dn * (self.imu_e - e1[0])
        idx = np.flatnonzero(np.sign(side[:-1]) * np.sign(side[1:]) < 0)
        frac = side[idx] / (side[idx] - side[idx + 1])
        pe = self.imu_e[idx] + frac * (self.imu_e[idx + 1] - self.imu_e[idx])
        pn = self.imu_n[idx] + frac * (self.imu_n[idx + 1] - self.imu_n[idx])
        u = ((pe - e1[0]) * de + (pn - n1[0]) * dn) / (de * de + dn * dn)
        keep = (u >= 0.0) & (u <= 1.0)
        t = self.imu_t[idx] + frac * (self.imu_t[idx + 1] - self.imu_t[idx])
        return np.asarray(t[keep], dtype=np.float64)

    def line_across(self, t_s: float, half_width_m: float = 20.0) -> dict[str, float]:
        """A line (lat1..lon2) across the true path at time ``t_s``, perpendicular to the
        direction of travel there, ``half_width_m`` either side (e.g. mid-bend at a corner's
        ``apex_s``)."""
        e, n = (float(np.interp(t_s, self.imu_t, x)) for x in (self.imu_e, self.imu_n))
        e0, n0, e1, n1 = (float(np.interp(t_s + dt, self.imu_t, x))
                          for dt in (-0.05, 0.05) for x in (self.imu_e, self.imu_n))
        step = math.hypot(e1 - e0, n1 - n0)
        le, ln = -(n1 - n0) / step * half_width_m, (e1 - e0) / step * half_width_m
        lat, lon = self.frame.to_latlon(np.array([e + le, e - le]), np.array([n + ln, n - ln]))
        return {"lat1": float(lat[0]), "lon1": float(lon[0]),
                "lat2": float(lat[1]), "lon2": float(lon[1])}

    def truth_json(self) -> dict[str, Any]:
        """The ground truth as JSON-able data (no per-sample arrays)."""
        return {
            "start": self.start.isoformat(),
            "closed": self.closed,
            "flat": self.flat,
            "duration_s": self.duration_s,
            "start_finish": self.start_finish,
            "lap_count": len(self.laps),
            "laps": [vars(x) for x in self.laps],
            "corners": [vars(x) for x in self.corners],
            "jumps": [vars(x) for x in self.jumps],
        }


@dataclass(frozen=True, kw_only=True)
class SyntheticSession:
    """Canonical ``gnss`` and ``imu`` tables plus their ground truth."""

    gnss: pa.Table
    imu: pa.Table
    truth: SyntheticTruth


def truth_laps(kin: Kinematics, laps: int, lap_len: float,
               pit_lap: int | None) -> tuple[TruthLap, ...]:
    cross = kin.time_at(LEAD_IN_M + lap_len * np.arange(laps + 1, dtype=np.float64))
    return tuple(
        TruthLap(lap=k, start_s=float(cross[k - 1]), end_s=float(cross[k]),
                 lap_time_s=float(cross[k] - cross[k - 1]), distance_m=float(lap_len),
                 pit_in=pit_lap == k, pit_out=pit_lap is not None and pit_lap + 1 == k)
        for k in range(1, laps + 1)
    )


def truth_corners(kin: Kinematics, track: Track, laps: int,
                  closed: bool) -> tuple[TruthCorner, ...]:
    out: list[TruthCorner] = []
    for k in range(laps + 1) if closed else range(1):
        base = LEAD_IN_M + k * track.length if closed else 0.0
        for idx, (s0, s1, ang, rad) in enumerate(track.corners):
            if base + s0 < 0 or base + s1 > kin.s[-1]:
                continue
            t0, ta, t1 = kin.time_at(base + np.array([s0, 0.5 * (s0 + s1), s1]))
            # Speed is linear in time within a cell: its minimum is at a cell boundary.
            i0, i1 = np.searchsorted(kin.s, base + np.array([s0, s1]))
            out.append(TruthCorner(
                corner=idx + 1, lap=k + 1 if closed and k < laps else None,
                start_s=float(t0), apex_s=float(ta), end_s=float(t1),
                direction="left" if ang > 0 else "right", radius_m=rad,
                angle_deg=math.degrees(ang), min_speed_mps=float(kin.v[i0:i1 + 1].min())))
    return tuple(out)


def start_finish_line(frame: LocalFrame, at: tuple[float, float] = (0.0, 0.0),
                      heading: float = 0.0) -> dict[str, float]:
    # Across the main straight at track distance 0 (at ``at``, heading ``heading``: east on a
    # drawn circuit): 8 m left to 20 m right, so the pit lane (12 m right) crosses it too.
    c, s = math.cos(heading), math.sin(heading)
    lat, lon = frame.to_latlon(np.array([at[0] - 8.0 * s, at[0] + 20.0 * s]),
                               np.array([at[1] + 8.0 * c, at[1] - 20.0 * c]))
    return {"lat1": float(lat[0]), "lon1": float(lon[0]),
            "lat2": float(lat[1]), "lon2": float(lon[1])}
