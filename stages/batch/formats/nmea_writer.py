"""Write a canonical GNSS stream as an NMEA 0183 log (one RMC + one GGA per sample).

Times are written to the millisecond, positions to 1e-5 arc-minutes (about 2 cm), speed in
knots to 1e-3. Only the GNSS stream has an NMEA form; IMU and AUX are not written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Final

import numpy as np
import pyarrow as pa

from stages.batch import canonical

_MPS_PER_KNOT: Final = 1852.0 / 3600.0
_DAY_US: Final = 86_400_000_000
_MIN_SCALE: Final = 100_000  # 1e-5 arc-minute units


def checksums(bodies: list[bytes]) -> np.ndarray:
    """XOR checksum of each sentence body (the text between ``$`` and ``*``), vectorised."""
    if not bodies:
        return np.zeros(0, dtype=np.uint8)
    lengths = np.fromiter((len(b) for b in bodies), dtype=np.int64, count=len(bodies))
    cx = np.bitwise_xor.accumulate(np.frombuffer(b"".join(bodies), dtype=np.uint8))
    ends = np.cumsum(lengths) - 1
    starts = ends - lengths + 1
    before = np.where(starts > 0, cx[np.maximum(starts - 1, 0)], 0)
    out: np.ndarray = cx[ends] ^ before
    return out


def _angles(values: np.ndarray, deg_width: int, pos: str, neg: str) -> list[str]:
    total = np.round(np.abs(values) * 60.0 * _MIN_SCALE).astype(np.int64)
    deg, rest = np.divmod(total, 60 * _MIN_SCALE)
    whole, frac = np.divmod(rest, _MIN_SCALE)
    hemi = np.where(values < 0, neg, pos)
    return [
        f"{d:0{deg_width}d}{w:02d}.{f:05d},{h}"
        for d, w, f, h in zip(
            deg.tolist(), whole.tolist(), frac.tolist(), hemi.tolist(), strict=True
        )
    ]


def _opt(values: list[float | None], fmt: str) -> list[str]:
    return ["" if v is None else format(v, fmt) for v in values]


def write_gnss(gnss: pa.Table) -> bytes:
    """Serialise a canonical-unit GNSS table (see :mod:`stages.batch.canonical`)."""
    n = gnss.num_rows
    if n == 0:
        return b""
    ts = gnss.column("ts").cast(pa.int64()).to_numpy()
    tod_ms = (ts % _DAY_US) // 1000
    hh, rem = np.divmod(tod_ms, 3_600_000)
    mm, rem = np.divmod(rem, 60_000)
    ss, ms = np.divmod(rem, 1000)
    times = [
        f"{h:02d}{m:02d}{s:02d}.{x:03d}"
        for h, m, s, x in zip(hh.tolist(), mm.tolist(), ss.tolist(), ms.tolist(), strict=True)
    ]
    day_cache: dict[int, str] = {}
    dates: list[str] = []
    for day in (ts // _DAY_US).tolist():
        text = day_cache.get(day)
        if text is None:
            d = dt.date(1970, 1, 1) + dt.timedelta(days=day)
            text = day_cache[day] = f"{d.day:02d}{d.month:02d}{d.year % 100:02d}"
        dates.append(text)
    lats = _angles(gnss.column("lat_deg").to_numpy(), 2, "N", "S")
    lons = _angles(gnss.column("lon_deg").to_numpy(), 3, "E", "W")
    speed = gnss.column("speed_mps").to_pylist()
    knots = _opt([None if v is None else v / _MPS_PER_KNOT for v in speed], ".3f")
    course = _opt(gnss.column("course_deg").to_pylist(), ".2f")
    alt = _opt(gnss.column("alt_m").to_pylist(), ".3f")
    hdop = _opt(gnss.column("hdop").to_pylist(), ".2f")
    quality = [1 if q is None else q for q in gnss.column("fix_quality").to_pylist()]
    sats = ["" if s is None else f"{s:02d}" for s in gnss.column("sats").to_pylist()]
    bodies: list[bytes] = []
    for i in range(n):
        t, la, lo = times[i], lats[i], lons[i]
        bodies.append(f"GNRMC,{t},A,{la},{lo},{knots[i]},{course[i]},{dates[i]},,,A".encode())
        bodies.append(
            f"GNGGA,{t},{la},{lo},{quality[i]},{sats[i]},{hdop[i]},{alt[i]},M,,M,,".encode()
        )
    sums = checksums(bodies).tolist()
    return b"".join(b"$%s*%02X\r\n" % (body, cs) for body, cs in zip(bodies, sums, strict=True))


def write(streams: Mapping[str, pa.Table]) -> bytes:
    """Format-registry entry point: write the ``gnss`` stream of ``streams`` (may be absent)."""
    gnss = streams.get(canonical.GNSS)
    return write_gnss(gnss if gnss is not None else canonical.empty(canonical.GNSS))
