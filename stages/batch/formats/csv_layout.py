"""CSV header vocabularies (layouts) and their detection; see :mod:`.csv` for the formats."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np

from stages.batch import canonical
from stages.batch.formats.parsed import FLU, FRD

CANONICAL: Final = "canonical"
RACELOG: Final = "racelog"
AUX_PREFIX: Final = "aux."
IMU_COLS: Final = tuple(canonical.CANONICAL_UNITS[canonical.IMU])


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A CSV header vocabulary: source column -> (stream, canonical column or channel, unit)."""

    name: str
    time_column: str
    epoch_ms: bool
    columns: Mapping[str, tuple[str, str, str]]
    imu_frame: str
    fix_column: str | None = None


CANONICAL_LAYOUT: Final = Layout(
    name=CANONICAL,
    time_column="ts",
    epoch_ms=False,
    columns={
        col: (stream, col, unit)
        for stream in (canonical.GNSS, canonical.IMU)
        for col, unit in canonical.CANONICAL_UNITS[stream].items()
    },
    imu_frame=FLU,
)
RACELOG_LAYOUT: Final = Layout(
    name=RACELOG,
    time_column="time_ms",
    epoch_ms=True,
    columns={
        "latitude": (canonical.GNSS, "lat_deg", "deg"),
        "longitude": (canonical.GNSS, "lon_deg", "deg"),
        "altitude_m": (canonical.GNSS, "alt_m", "m"),
        "speed_kmh": (canonical.GNSS, "speed_mps", "km/h"),
        "heading_deg": (canonical.GNSS, "course_deg", "deg"),
        "sats": (canonical.GNSS, "sats", "1"),
        "hdop": (canonical.GNSS, "hdop", "1"),
        "acc_x_g": (canonical.IMU, "ax_mps2", "g"),
        "acc_y_g": (canonical.IMU, "ay_mps2", "g"),
        "acc_z_g": (canonical.IMU, "az_mps2", "g"),
        "gyro_x_dps": (canonical.IMU, "gx_rps", "deg/s"),
        "gyro_y_dps": (canonical.IMU, "gy_rps", "deg/s"),
        "gyro_z_dps": (canonical.IMU, "gz_rps", "deg/s"),
        "temp_f": (canonical.AUX, canonical.TEMPERATURE, "degF"),
    },
    imu_frame=FRD,
    fix_column="fix_type",
)
LAYOUTS: Final = {CANONICAL: CANONICAL_LAYOUT, RACELOG: RACELOG_LAYOUT}
FIX_TYPE_QUALITY: Final = np.array([0, 6, 1, 1, 1, 0], dtype=np.int8)  # by u-blox fix_type


def header(data: bytes) -> list[str]:
    """Normalised header names of a CSV (BOM, quotes, blanks stripped; lower case)."""
    first = data.split(b"\n", 1)[0].decode("utf-8-sig", "replace")
    return [name.strip().strip('"').strip().lower() for name in first.split(",")]


def detect_layout(names: list[str]) -> Layout | None:
    """Which layout a header belongs to (None: not a session CSV we know)."""
    have = set(names)
    if "ts" in have and ({"lat_deg", "lon_deg"} <= have or set(IMU_COLS) <= have):
        return CANONICAL_LAYOUT
    if "time_ms" in have and ({"latitude", "longitude"} <= have or "acc_x_g" in have):
        return RACELOG_LAYOUT
    return None
