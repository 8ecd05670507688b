"""Track geometry of a synthetic session: curvature on a distance grid, closure, speed limits.

A closed circuit is a chain ``straight, corner, straight, ..., corner, straight`` whose first
and last straights are the two halves of the main straight (the start/finish line sits
between them, at track distance 0). Each corner is a smooth ``sin²`` curvature bump with peak
curvature ``1/R`` and signed turning angle ``α`` (left > 0); the angles sum to exactly 2π and
the straight lengths are solved (minimum-norm least squares, active set on minimum lengths)
so that the circuit closes. Tracks whose distant parts come closer than 35 m are redrawn. An
open road keeps its heading within ±75° of east, so it can never come back on itself.

The speed envelope is the usual lap-time-simulation one: ``min(v_max, sqrt(a_lat/|κ|))``, then
a backward (braking) and a forward (traction) pass; jump zones keep constant speed (no
traction in the air).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.ndimage import gaussian_filter1d
from scipy.spatial import cKDTree

from stages.batch.geo import FloatArray, path_distance

DS = 0.5  # distance grid, metres
A_ACC, A_BRK = 4.0, 8.0  # traction and braking limits, m/s²


@dataclass(frozen=True, kw_only=True)
class Track:
    """One lap (or the whole open road) on the distance grid."""

    length: float
    theta: FloatArray  # unwrapped heading, rad
    kappa: FloatArray
    east: FloatArray
    north: FloatArray
    v_base: FloatArray
    corners: tuple[tuple[float, float, float, float], ...]  # start, end, angle, radius
    jumps: tuple[float, ...]  # take-off track distance


def _corner_kappa(x: FloatArray, length: float, angle: float) -> FloatArray:
    # sin² bump: ∫κ = angle, peak |κ| = 1/R because length = 2|angle|R.
    return np.asarray((2.0 * angle / length) * np.sin(np.pi * x / length) ** 2)


def _corner_vector(length: float, angle: float) -> FloatArray:
    x = np.linspace(0.0, length, max(int(length / 0.05), 8))
    th = (angle / length) * (x - length / (2 * np.pi) * np.sin(2 * np.pi * x / length))
    return np.array([np.trapezoid(np.cos(th), x), np.trapezoid(np.sin(th), x)])


def _build(pieces: list[tuple[float, float, float]], flat: bool, rng: np.random.Generator,
           closed: bool, jump_straights: list[int]) -> Track:
    """Lay ``(length, angle, radius)`` pieces (angle 0 = straight) onto the distance grid."""
    bounds = np.concatenate(([0.0], np.cumsum([p[0] for p in pieces])))
    length = float(bounds[-1])
    s = np.linspace(0.0, length, round(length / DS) + 1)
    kappa = np.zeros_like(s)
    corners = []
    for i, (plen, ang, rad) in enumerate(pieces):
        if ang != 0.0:
            m = (s >= bounds[i]) & (s <= bounds[i + 1])
            kappa[m] = _corner_kappa(s[m] - bounds[i], plen, ang)
            corners.append((float(bounds[i]), float(bounds[i + 1]), ang, rad))
    step = np.diff(s)
    theta = np.concatenate(([0.0], np.cumsum(0.5 * (kappa[1:] + kappa[:-1]) * step)))
    c, sn = np.cos(theta), np.sin(theta)
    east = np.concatenate(([0.0], np.cumsum(0.5 * (c[1:] + c[:-1]) * step)))
    north = np.concatenate(([0.0], np.cumsum(0.5 * (sn[1:] + sn[:-1]) * step)))
    if closed:  # remove the O(ds²) integration residue so the lap closes exactly
        east -= east[-1] * s / length
        north -= north[-1] * s / length
    jumps: list[float] = []
    if not flat:
        for i in jump_straights:
            jumps.append(float(bounds[i] + 30.0 + rng.uniform(0.0, pieces[i][0] - 110.0)))
    zone = np.zeros_like(s, dtype=bool)
    for j in jumps:
        zone |= (s >= j - 25.0) & (s <= j + 65.0)
    v_max, a_lat = float(rng.uniform(30.0, 40.0)), float(rng.uniform(9.0, 12.0))
    v_base = _speed_profile(kappa, zone, v_max, a_lat, periodic=closed)
    return Track(length=length, theta=theta, kappa=kappa, east=east, north=north,
                  v_base=v_base, corners=tuple(corners), jumps=tuple(jumps))


def closed_track(rng: np.random.Generator, flat: bool,
                 first_radius: float | None = None) -> Track:
    """A random closed circuit; ``first_radius`` fixes its first corner's radius (drawn after
    the random radii, so every other draw is the same as without it)."""
    mins_main = (260.0, 320.0)
    for _ in range(2000):
        n = int(rng.integers(7, 11))
        mags = rng.uniform(math.radians(40), math.radians(140), n)
        sign = np.ones(n)
        sign[rng.choice(n, int(rng.integers(1, 3)), replace=False)] = -1.0
        left = sign > 0
        mags[left] *= (2 * np.pi + mags[~left].sum()) / mags[left].sum()
        if mags.max() > math.radians(170):
            continue
        angles, radii = sign * mags, rng.uniform(18.0, 110.0, n)
        if first_radius is not None:
            radii[0] = first_radius
        clen = 2.0 * mags * radii
        heads = np.concatenate(([0.0], np.cumsum(angles)))  # heading of each straight
        gap = sum(
            _rot(_corner_vector(float(clen[i]), float(angles[i])), float(heads[i]))
            for i in range(n)
        )
        lmin = np.full(n + 1, 50.0)
        lmin[0], lmin[-1] = mins_main
        lens = np.concatenate(([rng.uniform(300, 450)], rng.uniform(60, 260, n - 1),
                               [rng.uniform(320, 450)]))
        closed = _close(lens, lmin, heads, np.asarray(gap))
        if closed is None:
            continue
        lens = closed
        pieces: list[tuple[float, float, float]] = []
        for i in range(n):
            pieces.append((float(lens[i]), 0.0, 0.0))
            pieces.append((float(clen[i]), float(angles[i]), float(radii[i])))
        pieces.append((float(lens[n]), 0.0, 0.0))
        cand = [2 * i for i in range(1, n) if lens[i] >= 110.0]
        picks = sorted(rng.choice(cand, min(3, len(cand)), replace=False).tolist()) if cand else []
        track = _build(pieces, flat, rng, True, picks)
        if _self_clear(track):
            return track
    raise RuntimeError("could not draw a closed track")  # pragma: no cover - never observed


def open_track(rng: np.random.Generator, flat: bool, laps: int) -> Track:
    target = 2400.0 * laps
    pieces: list[tuple[float, float, float]] = [(float(rng.uniform(260, 400)), 0.0, 0.0)]
    heading, total, straights = 0.0, pieces[0][0], []
    lim = math.radians(75)
    while total < target:
        mag = float(rng.uniform(math.radians(35), math.radians(110)))
        ang = mag if rng.random() < 0.5 else -mag
        if abs(heading + ang) > lim:
            ang = -ang
        if abs(heading + ang) > lim:
            ang = math.copysign(lim, -heading) - heading if heading else math.radians(35)
        rad = float(rng.uniform(18.0, 110.0))
        slen = float(rng.uniform(60, 260))
        heading += ang
        pieces += [(2.0 * abs(ang) * rad, ang, rad), (slen, 0.0, 0.0)]
        if slen >= 110.0:
            straights.append(len(pieces) - 1)
        total += 2.0 * abs(ang) * rad + slen
    picks = straights[:: max(1, len(straights) // (3 * laps))][: 3 * laps]
    return _build(pieces, flat, rng, False, picks)


def polyline_track(rng: np.random.Generator, east: FloatArray, north: FloatArray,
                   closed: bool, smooth_m: float = 6.0) -> Track:
    """A track along a given polyline (metres; a real circuit's centreline, say): resampled
    every metre, smoothed over ``smooth_m`` (a polyline's corners have no curvature a car
    could drive), laid on the distance grid from its first vertex; heading and curvature
    from the smoothed path, the speed envelope from the curvature as for a drawn circuit.
    ``closed``: the polyline is a circuit's outline (its last vertex joins the first)."""
    e, n = np.asarray(east, dtype=np.float64), np.asarray(north, dtype=np.float64)
    if closed and math.hypot(e[-1] - e[0], n[-1] - n[0]) > 1e-6:
        e, n = np.append(e, e[0]), np.append(n, n[0])
    d = path_distance(e, n)
    mode = "wrap" if closed else "nearest"
    s1 = np.arange(0.0, d[-1], 1.0) if closed else np.linspace(0.0, d[-1], int(d[-1]) + 1)
    se = gaussian_filter1d(np.interp(s1, d, e), smooth_m, mode=mode)
    sn = gaussian_filter1d(np.interp(s1, d, n), smooth_m, mode=mode)
    if closed:
        se, sn = np.append(se, se[0]), np.append(sn, sn[0])
    d2 = path_distance(se, sn)
    length = float(d2[-1])
    s = np.linspace(0.0, length, round(length / DS) + 1)
    ge, gn = np.interp(s, d2, se), np.interp(s, d2, sn)
    if closed:  # central differences round the closing point
        de = np.roll(ge[:-1], -1) - np.roll(ge[:-1], 1)
        dn = np.roll(gn[:-1], -1) - np.roll(gn[:-1], 1)
        raw = np.arctan2(np.append(dn, dn[0]), np.append(de, de[0]))
    else:
        raw = np.arctan2(np.gradient(gn), np.gradient(ge))
    theta = np.unwrap(raw)
    kappa = gaussian_filter1d(np.gradient(theta, DS), 4.0, mode="nearest")
    v_max, a_lat = float(rng.uniform(30.0, 40.0)), float(rng.uniform(9.0, 12.0))
    v_base = _speed_profile(kappa, np.zeros_like(s, dtype=bool), v_max, a_lat, periodic=closed)
    return Track(length=length, theta=theta, kappa=kappa, east=ge, north=gn, v_base=v_base,
                 corners=(), jumps=())


def _rot(vec: FloatArray, ang: float) -> FloatArray:
    c, s = math.cos(ang), math.sin(ang)
    return np.array([c * vec[0] - s * vec[1], s * vec[0] + c * vec[1]])


def _close(lens: FloatArray, lmin: FloatArray, heads: FloatArray,
           gap: FloatArray) -> FloatArray | None:
    """Adjust straight lengths (min-norm, active set on the minimums) so the loop closes."""
    lens = lens.copy()
    free = np.ones(lens.size, dtype=bool)
    u = np.vstack([np.cos(heads), np.sin(heads)])
    for _ in range(lens.size):
        resid = -(gap + u @ lens)
        uf = u[:, free]
        lens[free] += uf.T @ np.linalg.solve(uf @ uf.T, resid)
        low = free & (lens < lmin)
        if not low.any():
            return lens
        lens[low] = lmin[low]
        free &= ~low
        if free.sum() < 3:
            return None
    return None


def _self_clear(track: Track) -> bool:
    """True when no two parts of the lap further than 120 m apart come within 35 m."""
    step = int(5.0 / DS)
    pts = np.column_stack([track.east[::step], track.north[::step]])
    s = np.arange(pts.shape[0]) * step * DS
    pairs = cKDTree(pts).query_pairs(35.0, output_type="ndarray")
    sep = np.abs(s[pairs[:, 0]] - s[pairs[:, 1]])
    return bool(np.all(np.minimum(sep, track.length - sep) <= 120.0))


def _speed_profile(kappa: FloatArray, zone: FloatArray, v_max: float, a_lat: float,
                   *, periodic: bool) -> FloatArray:
    lim = np.minimum(v_max, np.sqrt(a_lat / np.maximum(np.abs(kappa), 1e-9)))
    reps = 3 if periodic else 1
    lim_l, zone_l = np.tile(lim, reps).tolist(), np.tile(zone, reps).tolist()
    n = len(lim_l)
    brk, acc = 2 * A_BRK * DS, 2 * A_ACC * DS
    for i in range(n - 2, -1, -1):  # braking pass
        nxt = lim_l[i + 1]
        cap = nxt if zone_l[i] else math.sqrt(nxt * nxt + brk)
        lim_l[i] = min(lim_l[i], cap)
    for i in range(1, n):  # traction pass
        prv = lim_l[i - 1]
        cap = prv if zone_l[i] else math.sqrt(prv * prv + acc)
        lim_l[i] = min(lim_l[i], cap)
    out = np.asarray(lim_l)
    return out[lim.size:2 * lim.size] if periodic else out


def lap_grid(track: Track) -> FloatArray:
    return np.linspace(0.0, track.length, track.theta.size)

