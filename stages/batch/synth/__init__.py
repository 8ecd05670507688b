"""Synthetic recorded sessions with ground truth, for tests, benchmarks and the demo.

Theory of operation
-------------------
1. **Track** (:mod:`.track`): a random closed circuit of straights and ``sin²``-curvature
   corners of various radii that closes exactly, or an open road that never returns - or a
   given centreline (a library circuit's, a stage's road), smoothed, with the speed envelope
   from its curvature.
2. **Speed and motion** (:mod:`.motion`): a braking/traction speed envelope, a per-lap pace
   factor (±2.5 %) so lap times differ, a standing start, a stop at the end and an optional pit
   stop; constant acceleration between 0.5 m grid points, so everything is exactly consistent.
3. **Sensors** (:mod:`.sensors`): IMU = true specific force and yaw rate + noise + bias, jumps
   as free fall and landing spike; GNSS = true position + white and slow noise, speed, course.
4. **Truth** (:mod:`.truth`): lap crossing times, corner passes, jumps, true positions.

Deterministic for given arguments; vectorised numpy - a one-hour session at 100 Hz IMU takes
about a second.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np

from stages.batch.geo import FloatArray, LocalFrame
from stages.batch.synth.motion import (
    COOL_DOWN_M,
    LEAD_IN_M,
    REST_END_S,
    Kinematics,
    pit_dwell,
    pit_geometry,
    pose,
    sample_times,
    session_speed,
)
from stages.batch.synth.sensors import gnss_table, imu_table, jump_passes
from stages.batch.synth.track import DS, closed_track, open_track, polyline_track
from stages.batch.synth.truth import (
    SyntheticSession,
    SyntheticTruth,
    TruthCorner,
    TruthJump,
    TruthLap,
    start_finish_line,
    truth_corners,
    truth_laps,
)

__all__ = [
    "SyntheticSession",
    "SyntheticTruth",
    "TruthCorner",
    "TruthJump",
    "TruthLap",
    "synthesize",
]

ORIGIN = LocalFrame(lat0_deg=52.0712, lon0_deg=-1.0161)
DEFAULT_START = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)


def synthesize(
    *,
    laps: int,
    imu_hz: float = 100.0,
    gnss_hz: float = 10.0,
    seed: int = 0,
    closed: bool = True,
    flat: bool = False,
    gnss_noise_m: float = 2.0,
    gnss_slow_noise_m: float = 0.3,
    hdop: float = 0.9,
    imu_accel_noise: float = 0.08,
    imu_gyro_noise: float = 0.003,
    imu_bias: bool = True,
    pit_lap: int | None = None,
    pit_stop_s: float = 8.0,
    gnss_gaps: tuple[tuple[float, float], ...] = (),
    start: datetime | None = None,
    first_corner_radius_m: float | None = None,
    centreline: tuple[FloatArray, FloatArray] | None = None,
) -> SyntheticSession:
    """A deterministic synthetic session (same arguments → identical tables and truth).

    ``laps`` complete laps of a random closed circuit (between a standing start 200 m before the
    line and a stop 150 m after it), or, with ``closed=False``, one drive along an open road of
    about ``laps`` laps' length. ``pit_lap`` drives through the pit lane (12 m right of the main
    straight) at the end of that lap with a ``pit_stop_s`` stop. ``gnss_gaps`` removes fixes in
    ``(start_s, duration_s)`` windows. ``first_corner_radius_m`` gives the circuit's first
    corner that radius (the others stay random), e.g. to time a line drawn across a bend.
    ``gnss_noise_m`` is the per-axis white noise σ at HDOP ``hdop``; ``gnss_slow_noise_m`` a
    20 s Gauss-Markov error on top.

    ``centreline`` = ``(lat, lon)`` drives that polyline instead of a random track (a library
    circuit's centreline: ``closed`` laps of it from its first vertex, where its start/finish
    line is; with ``closed=False``, once from end to end, a point-to-point stage). The frame
    is anchored at its first vertex; the truth's ``start_finish`` lies across the path there.
    """
    if laps < 1:
        raise ValueError("laps must be >= 1")
    if pit_lap is not None and not (closed and 1 <= pit_lap <= laps):
        raise ValueError("pit_lap needs a closed track and 1 <= pit_lap <= laps")
    if centreline is not None and pit_lap is not None:
        raise ValueError("pit_lap needs a drawn circuit (its pit lane is beside the straight)")
    rng = np.random.default_rng(seed)
    origin = ORIGIN
    if centreline is not None:
        lat = np.asarray(centreline[0], dtype=np.float64)
        lon = np.asarray(centreline[1], dtype=np.float64)
        origin = LocalFrame(lat0_deg=float(lat[0]), lon0_deg=float(lon[0]))
        track = polyline_track(rng, *origin.to_en(lat, lon), closed)
    elif closed:
        track = closed_track(rng, flat, first_corner_radius_m)
    else:
        track = open_track(rng, flat, laps)
    lap_len = track.length
    total = LEAD_IN_M + laps * lap_len + COOL_DOWN_M if closed else lap_len
    grid = np.arange(0.0, math.floor(total / DS) * DS + DS / 2, DS)
    v = session_speed(rng, track, grid, laps, closed, pit_lap)
    pit = pit_geometry(pit_lap, lap_len) if pit_lap is not None else None
    kin = Kinematics.build(grid, v, pit_dwell(grid, pit, pit_stop_s))
    t_imu = sample_times(kin.t_end + REST_END_S, imu_hz, 0.0)
    t_gnss = sample_times(kin.t_end + REST_END_S, gnss_hz, float(rng.uniform(0, 1 / gnss_hz)))
    for g0, gd in gnss_gaps:
        t_gnss = t_gnss[(t_gnss < g0) | (t_gnss >= g0 + gd)]
    jumps = jump_passes(rng, kin, track, laps, closed)
    imu_pose = pose(kin, track, t_imu, closed, pit)
    gnss_pose = pose(kin, track, t_gnss, closed, pit)
    t0 = start or DEFAULT_START
    imu = imu_table(rng, t0, t_imu, imu_pose, jumps, imu_accel_noise, imu_gyro_noise, imu_bias)
    gnss = gnss_table(rng, t0, origin, t_gnss, gnss_pose, jumps, gnss_noise_m,
                      gnss_slow_noise_m, hdop, gnss_hz)
    truth = SyntheticTruth(
        start=t0, closed=closed, flat=flat, frame=origin,
        laps=truth_laps(kin, laps, lap_len, pit_lap) if closed else (),
        corners=truth_corners(kin, track, laps, closed),
        jumps=tuple(j.truth for j in jumps),
        start_finish=start_finish_line(origin, (float(track.east[0]), float(track.north[0])),
                                       float(track.theta[0])) if closed else None,
        duration_s=float(t_imu[-1]),
        imu_t=t_imu, imu_e=imu_pose["e"], imu_n=imu_pose["n"],
        gnss_t=t_gnss, gnss_e=gnss_pose["e"], gnss_n=gnss_pose["n"],
    )
    return SyntheticSession(gnss=gnss, imu=imu, truth=truth)

