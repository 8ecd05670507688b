"""Small synthetic canonical streams for the early session stage tests."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from stages.batch import canonical
from stages.batch.contract import ArtifactBlob
from stages.batch.geo import LocalFrame

T0_US = 1_714_557_600_000_000  # 2024-05-01T10:00:00Z


def ts(offsets_us: np.ndarray) -> pa.Array:
    return pa.array(T0_US + np.asarray(offsets_us, dtype=np.int64), canonical.TS_TYPE)


def gnss(n: int, *, hz: float = 10.0, speed: np.ndarray | None = None) -> pa.Table:
    """A GNSS track driving east from (-45.0, 170.0) at the given speeds (default 20 m/s)."""
    step = np.arange(n)
    spd = np.full(n, 20.0) if speed is None else speed
    east_m = np.concatenate(([0.0], np.cumsum(spd[:-1] / hz)))
    # metres to degrees on the WGS84 ellipsoid, as the stages measure them (stages.batch.geo)
    _, lon = LocalFrame(lat0_deg=-45.0, lon0_deg=170.0).to_latlon(east_m, np.zeros(n))
    return canonical.conform(
        canonical.GNSS,
        pa.table(
            {
                "ts": ts(np.round(step * 1e6 / hz)),
                "lat_deg": np.full(n, -45.0),
                "lon_deg": lon,
                "alt_m": 100.0 + 0.01 * step,
                "speed_mps": spd,
                "course_deg": np.full(n, 90.0),
                "hdop": np.full(n, 0.7),
                "fix_quality": pa.array(np.ones(n, dtype=np.int8)),
                "sats": pa.array(np.full(n, 14, dtype=np.int16)),
            }
        ),
    )


def imu(n: int, *, hz: float = 100.0, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols = {c: rng.normal(scale=0.5, size=n) for c in canonical.CANONICAL_UNITS[canonical.IMU]}
    cols["az_mps2"] = cols["az_mps2"] + 9.80665
    return canonical.conform(
        canonical.IMU, pa.table({"ts": ts(np.round(np.arange(n) * 1e6 / hz)), **cols})
    )


def aux(channel: str, values: list[float], *, hz: float = 1.0) -> pa.Table:
    n = len(values)
    return canonical.conform(
        canonical.AUX,
        pa.table(
            {
                "ts": ts(np.round(np.arange(n) * 1e6 / hz)),
                "channel": [channel] * n,
                "value": pa.array(values, pa.float64()),
            }
        ),
    )


def blob(name: str, data: bytes) -> ArtifactBlob:
    return ArtifactBlob(name=name, data=data, sha256=hashlib.sha256(data).hexdigest())
