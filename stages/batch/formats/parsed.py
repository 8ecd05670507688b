"""What every format reader returns: the canonical stream set, still in source units."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

FLU = "FLU"
"""Body frame x forward, y left, z up (the canonical IMU frame)."""
FRD = "FRD"
"""Body frame x forward, y right, z down (aviation / many loggers)."""
FRAMES = (FLU, FRD)


@dataclass(frozen=True, kw_only=True)
class ParsedSession:
    """A parsed artifact.

    ``streams`` maps ``"gnss"``/``"imu"``/``"aux"`` to tables with the canonical columns
    (:func:`stages.batch.canonical.conform`), but values are in the units the source used:
    ``units[stream][column]`` names every column whose unit differs from the canonical one
    (and ``units["aux"][channel]`` for AUX channels). ``imu_frame`` is the body frame the IMU
    columns are expressed in. ``stats`` are reader counters (JSON-able) for the job summary.
    """

    streams: Mapping[str, pa.Table]
    units: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    imu_frame: str = FLU
    stats: Mapping[str, Any] = field(default_factory=dict)
