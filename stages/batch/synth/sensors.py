"""Sensor models of a synthetic session: IMU and GNSS tables, jumps' vertical motion.

IMU (body frame x forward, y left, z up) = true specific force and yaw rate + white noise + a
constant bias; a jump adds a ramp, a ballistic free fall (specific force ≈ 0) and a landing
spike, then settles. GNSS = true position + white noise (scaled by HDOP) + a slow (20 s)
Gauss-Markov error, plus speed and course.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
from scipy.signal import lfilter

from stages.batch.canonical import GNSS_SCHEMA, IMU_SCHEMA
from stages.batch.geo import FloatArray, LocalFrame, heading_to_course_deg
from stages.batch.synth.motion import LEAD_IN_M, Kinematics
from stages.batch.synth.track import Track
from stages.batch.synth.truth import TruthJump

G = 9.80665


@dataclass(frozen=True, kw_only=True)
class JumpPass:
    takeoff: float
    vz0: float
    truth: TruthJump

    def profile(self, t: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(height, vertical acceleration) relative to flat ground at times ``t``."""
        tr, tc, ts = 0.3, 0.15, 1.5
        hr = self.vz0 * tr / 2
        ta = self.truth.airtime_s
        vl = self.vz0 - G * ta
        tau = t - self.takeoff
        z, az = np.zeros_like(t), np.zeros_like(t)
        m = (tau >= -tr) & (tau < 0)
        z[m], az[m] = self.vz0 / tr * (tau[m] + tr) ** 2 / 2, self.vz0 / tr
        m = (tau >= 0) & (tau < ta)
        z[m], az[m] = hr + self.vz0 * tau[m] - G * tau[m] ** 2 / 2, -G
        m = (tau >= ta) & (tau < ta + tc)
        x = tau[m] - ta
        z[m], az[m] = vl * x - vl / tc * x**2 / 2, -vl / tc
        m = (tau >= ta + tc) & (tau < ta + tc + ts)
        x, zc = tau[m] - ta - tc, vl * tc / 2
        z[m] = zc * (1 + np.cos(np.pi * x / ts)) / 2
        az[m] = -zc * (np.pi / ts) ** 2 / 2 * np.cos(np.pi * x / ts)
        return z, az


def jump_passes(rng: np.random.Generator, kin: Kinematics, track: Track, laps: int,
                closed: bool) -> list[JumpPass]:
    out: list[JumpPass] = []
    passes = range(laps + 1) if closed else range(1)
    for k in passes:
        for jd in track.jumps:
            s = LEAD_IN_M + k * track.length + jd if closed else jd
            if s + 65.0 > kin.s[-1]:
                continue
            vz0 = float(rng.uniform(3.0, 4.5))
            hr = vz0 * 0.3 / 2
            ta = (vz0 + math.sqrt(vz0**2 + 2 * G * hr)) / G
            t0 = float(kin.time_at(np.array([s]))[0])
            peak = G + (G * ta - vz0) / 0.15
            lap = k + 1 if closed and k < laps else None
            truth = TruthJump(jump=len(out) + 1, lap=lap, takeoff_s=t0, landing_s=t0 + ta,
                              airtime_s=ta, landing_peak_mps2=peak)
            out.append(JumpPass(takeoff=t0, vz0=vz0, truth=truth))
    return out


def _vertical(t: FloatArray, jumps: list[JumpPass]) -> tuple[FloatArray, FloatArray]:
    z, az = np.zeros_like(t), np.zeros_like(t)
    for j in jumps:
        lo, hi = np.searchsorted(t, [j.takeoff - 0.5, j.takeoff + 4.0])
        zz, aa = j.profile(t[lo:hi])
        z[lo:hi] += zz
        az[lo:hi] += aa
    return z, az


def _ts(start: datetime, t: FloatArray) -> pa.Array:
    base = int(start.timestamp() * 1_000_000)
    return pa.array(base + np.round(t * 1e6).astype(np.int64), type=pa.timestamp("us", tz="UTC"))


def imu_table(rng: np.random.Generator, start: datetime, t: FloatArray,
              pose: dict[str, FloatArray], jumps: list[JumpPass], acc_noise: float,
              gyro_noise: float, bias: bool) -> pa.Table:
    n = t.size
    ab = rng.uniform(-0.15, 0.15, 3) if bias else np.zeros(3)
    gb = rng.uniform(-0.01, 0.01, 3) if bias else np.zeros(3)
    _, az = _vertical(t, jumps)
    cols = [
        pose["ax"] + ab[0] + rng.normal(0, acc_noise, n),
        pose["ay"] + ab[1] + rng.normal(0, acc_noise, n),
        G + az + ab[2] + rng.normal(0, acc_noise, n),
        gb[0] + rng.normal(0, gyro_noise, n),
        gb[1] + rng.normal(0, gyro_noise, n),
        pose["yaw_rate"] + gb[2] + rng.normal(0, gyro_noise, n),
    ]
    return pa.Table.from_arrays([_ts(start, t), *[pa.array(c) for c in cols]], schema=IMU_SCHEMA)


def gnss_table(rng: np.random.Generator, start: datetime, frame: LocalFrame, t: FloatArray,
               pose: dict[str, FloatArray], jumps: list[JumpPass], noise: float,
               slow: float, hdop0: float, hz: float) -> pa.Table:
    n = t.size
    hdop = hdop0 * (1.0 + 0.15 * np.sin(2 * np.pi * t / 600.0 + rng.uniform(0, 6.3)))
    sigma = noise * hdop / hdop0
    phi = math.exp(-1.0 / (20.0 * hz))  # 20 s correlation time
    gm = [lfilter([math.sqrt(1 - phi * phi) * slow], [1.0, -phi], rng.normal(0, 1, n))
          for _ in range(2)]
    e = pose["e"] + sigma * rng.normal(0, 1, n) + gm[0]
    nn = pose["n"] + sigma * rng.normal(0, 1, n) + gm[1]
    lat, lon = frame.to_latlon(e, nn)
    z, _ = _vertical(t, jumps)
    speed = np.abs(pose["speed"] + rng.normal(0, 0.1, n))
    course = heading_to_course_deg(pose["psi"] + rng.normal(0, math.radians(0.5), n))
    moving = pose["speed"] > 0.5
    cols: list[pa.Array] = [
        _ts(start, t), pa.array(lat), pa.array(lon),
        pa.array(120.0 + z + rng.normal(0, 1.5 * noise, n)), pa.array(speed),
        pa.array(np.where(moving, course, np.nan), from_pandas=True),
        pa.array(np.round(hdop, 1)), pa.array(np.ones(n, dtype=np.int8)),
        pa.array(rng.integers(10, 15, n).astype(np.int16)),
    ]
    return pa.Table.from_arrays(cols, schema=GNSS_SCHEMA)

