"""Motion along a synthetic track: session speed, exact constant-acceleration kinematics,
the pit lane, and poses (position, heading, body-frame acceleration, yaw rate) at any time.

Between grid points (0.5 m) acceleration is constant, so time, distance, speed and
acceleration are exactly consistent; velocity and acceleration vectors come from the path's
first and second derivatives, so integrating the IMU truth reproduces the path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.batch.geo import FloatArray
from stages.batch.synth.track import A_ACC, A_BRK, DS, Track, lap_grid

LEAD_IN_M = 200.0  # standing start this far before the line
COOL_DOWN_M = 150.0  # stop this far after the last crossing
REST_START_S, REST_END_S = 5.0, 3.0
PIT_OFFSET_M, PIT_HALF_M, PIT_RAMP_M, PIT_BOX_M = 12.0, 200.0, 80.0, -30.0
V_PIT = 16.0


def session_speed(rng: np.random.Generator, track: Track, grid: FloatArray, laps: int,
                  closed: bool, pit_lap: int | None) -> FloatArray:
    if closed:
        s_lap = np.mod(grid - LEAD_IN_M, track.length)
        nodes = LEAD_IN_M + track.length * np.arange(-1, laps + 2)
        factor = np.interp(grid, nodes, rng.uniform(0.975, 1.025, nodes.size))
        v = factor * np.interp(s_lap, lap_grid(track), track.v_base)
    else:
        v = np.interp(grid, lap_grid(track), track.v_base)
    end = grid[-1]
    v = np.minimum(v, np.sqrt(2 * A_ACC * grid))
    v = np.minimum(v, np.sqrt(2 * A_BRK * np.maximum(end - grid, 0.0)))
    if pit_lap is not None:
        line = LEAD_IN_M + pit_lap * track.length
        a, b = line - PIT_HALF_M, line + PIT_HALF_M
        env = np.where(grid < a, np.sqrt(V_PIT**2 + 2 * A_BRK * np.maximum(a - grid, 0)), V_PIT)
        env = np.where(grid > b, np.sqrt(V_PIT**2 + 2 * A_ACC * np.maximum(grid - b, 0)), env)
        box = snap(line + PIT_BOX_M)
        env = np.minimum(env, np.where(grid < box, np.sqrt(2 * A_BRK * np.abs(box - grid)),
                                       np.sqrt(2 * A_ACC * np.abs(grid - box))))
        v = np.minimum(v, env)
    return np.asarray(v)


def snap(x: float) -> float:
    return round(x / DS) * DS


@dataclass(frozen=True, kw_only=True)
class Kinematics:
    """Constant-acceleration cells: cell i starts at S[i] with speed v[i] at time T[i] + w[i]."""

    s: FloatArray
    v: FloatArray
    a: FloatArray
    t_move: FloatArray  # time the cell's motion starts (after any dwell)
    dt: FloatArray
    t_end: float

    @classmethod
    def build(cls, grid: FloatArray, v: FloatArray, dwell: FloatArray) -> Kinematics:
        vs = v[:-1] + v[1:]
        dt = 2.0 * DS / vs
        acc = (v[1:] ** 2 - v[:-1] ** 2) / (2.0 * DS)
        starts = np.concatenate(([0.0], np.cumsum(dt + dwell[:-1])))[:-1] + REST_START_S
        t_move = starts + dwell[:-1]
        return cls(s=grid[:-1], v=v[:-1], a=acc, t_move=t_move, dt=dt,
                   t_end=float(t_move[-1] + dt[-1]))

    def at_time(self, t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(distance, speed, tangential acceleration) at times ``t``."""
        i = np.clip(np.searchsorted(self.t_move, t, side="right") - 1, 0, self.s.size - 1)
        tau = np.clip(t - self.t_move[i], 0.0, self.dt[i])
        moving = (t > self.t_move[i]) & (t < self.t_move[i] + self.dt[i])
        s = self.s[i] + self.v[i] * tau + 0.5 * self.a[i] * tau**2
        v = np.where(t < self.t_move[i], self.v[i], self.v[i] + self.a[i] * tau)
        return s, v, np.where(moving, self.a[i], 0.0)

    def time_at(self, s: FloatArray) -> FloatArray:
        """Time the vehicle first reaches distance ``s``."""
        i = np.clip(np.searchsorted(self.s, s, side="right") - 1, 0, self.s.size - 1)
        ds = s - self.s[i]
        root = np.sqrt(np.maximum(self.v[i] ** 2 + 2 * self.a[i] * ds, 0.0))
        return np.asarray(self.t_move[i] + 2 * ds / np.maximum(self.v[i] + root, 1e-9))


def sample_times(end: float, hz: float, offset: float) -> FloatArray:
    t = offset + np.arange(math.floor((end - offset) * hz) + 1) / hz
    return np.round(t * 1e6) / 1e6  # the tables carry microseconds; truth uses the same times


@dataclass(frozen=True, kw_only=True)
class Pit:
    line: float  # session distance of the pit lap's line crossing


def pit_geometry(pit_lap: int, lap_len: float) -> Pit:
    return Pit(line=LEAD_IN_M + pit_lap * lap_len)


def pit_dwell(grid: FloatArray, pit: Pit | None, stop_s: float) -> FloatArray:
    dwell = np.zeros_like(grid)
    if pit is not None:
        dwell[round(snap(pit.line + PIT_BOX_M) / DS)] = stop_s
    return dwell


def _pit_offset(s: FloatArray, pit: Pit) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Lateral offset to the right of the racing line and its first two derivatives."""
    x = np.abs(s - pit.line)
    u = np.clip((PIT_HALF_M - x) / PIT_RAMP_M, 0.0, 1.0)  # 0 outside, 1 in the lane
    sgn = -np.sign(s - pit.line)  # du/ds
    ramp = (u > 0) & (u < 1)
    d = PIT_OFFSET_M * (3 * u**2 - 2 * u**3)
    d1 = np.where(ramp, PIT_OFFSET_M * (6 * u - 6 * u**2) * sgn / PIT_RAMP_M, 0.0)
    d2 = np.where(ramp, PIT_OFFSET_M * (6 - 12 * u) / PIT_RAMP_M**2, 0.0)
    return d, d1, d2


def pose(kin: Kinematics, track: Track, t: FloatArray, closed: bool,
         pit: Pit | None) -> dict[str, FloatArray]:
    s, v, a_s = kin.at_time(t)
    lap_s = np.mod(s - LEAD_IN_M, track.length) if closed else s
    grid = lap_grid(track)
    turns = np.floor((s - LEAD_IN_M) / track.length) if closed else np.zeros_like(s)
    theta = np.interp(lap_s, grid, track.theta) + 2 * np.pi * turns
    kappa = np.interp(lap_s, grid, track.kappa)
    e = np.interp(lap_s, grid, track.east)
    n = np.interp(lap_s, grid, track.north)
    c, sn = np.cos(theta), np.sin(theta)
    d1x, d1y = c.copy(), sn.copy()  # dP/ds
    d2x, d2y = -kappa * sn, kappa * c  # d²P/ds²
    if pit is not None:  # the pit lane lies on the straight (κ = 0): P + d·right
        d, dd, ddd = _pit_offset(s, pit)
        e, n = e + d * sn, n - d * c
        d1x, d1y = d1x + dd * sn, d1y - dd * c
        d2x, d2y = d2x + ddd * sn, d2y - ddd * c
    psi = theta + np.arctan2(c * d1y - sn * d1x, c * d1x + sn * d1y)
    norm2 = d1x**2 + d1y**2
    ax_w, ay_w = d2x * v**2 + d1x * a_s, d2y * v**2 + d1y * a_s
    cp, sp = np.cos(psi), np.sin(psi)
    return {
        "e": e, "n": n, "psi": psi, "speed": np.sqrt(norm2) * v,
        "ax": cp * ax_w + sp * ay_w, "ay": -sp * ax_w + cp * ay_w,
        "yaw_rate": v * (d1x * d2y - d1y * d2x) / norm2, "t": t,
    }

