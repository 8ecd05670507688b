"""Unit vocabulary of the session formats and the affine maps into canonical units.

Every unit a reader may report maps to ``(canonical_unit, scale, offset)`` with
``canonical = source * scale + offset``. ``normalise_units`` applies these; writers of
vendor layouts apply the inverse. Unknown units are an error rather than a silent pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import numpy as np

STANDARD_GRAVITY: Final = 9.80665
"""m/s² per g (CGPM 1901 standard gravity)."""

UNITS: Final[Mapping[str, tuple[str, float, float]]] = {
    # identity units
    "m": ("m", 1.0, 0.0),
    "m/s": ("m/s", 1.0, 0.0),
    "m/s2": ("m/s2", 1.0, 0.0),
    "rad/s": ("rad/s", 1.0, 0.0),
    "deg": ("deg", 1.0, 0.0),
    "degC": ("degC", 1.0, 0.0),
    "1": ("1", 1.0, 0.0),
    "1/min": ("1/min", 1.0, 0.0),
    # conversions
    "ft": ("m", 0.3048, 0.0),
    "kn": ("m/s", 1852.0 / 3600.0, 0.0),
    "km/h": ("m/s", 1.0 / 3.6, 0.0),
    "mph": ("m/s", 0.44704, 0.0),
    "g": ("m/s2", STANDARD_GRAVITY, 0.0),
    "deg/s": ("rad/s", math.pi / 180.0, 0.0),
    "rad": ("deg", 180.0 / math.pi, 0.0),
    "degF": ("degC", 5.0 / 9.0, -32.0 * 5.0 / 9.0),
    "K": ("degC", 1.0, -273.15),
    "1/s": ("1/min", 60.0, 0.0),
}


def canonical_unit(unit: str) -> str:
    """The canonical unit ``unit`` converts to; ``KeyError`` for an unknown unit."""
    return UNITS[unit][0]


def to_canonical(values: np.ndarray, unit: str) -> np.ndarray:
    """Convert ``values`` from ``unit`` into its canonical unit (NaN stays NaN)."""
    _, scale, offset = UNITS[unit]
    if scale == 1.0 and offset == 0.0:
        return values
    out: np.ndarray = values * scale + offset
    return out


def from_canonical(values: np.ndarray, unit: str) -> np.ndarray:
    """Convert canonical ``values`` into ``unit`` (inverse of :func:`to_canonical`)."""
    _, scale, offset = UNITS[unit]
    if scale == 1.0 and offset == 0.0:
        return values
    out: np.ndarray = (values - offset) / scale
    return out
