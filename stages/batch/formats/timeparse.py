"""Timestamp parsing shared by the text formats: RFC 3339 / ISO 8601 strings and epoch ms.

Everything becomes integer microseconds since the Unix epoch, UTC. A string without an
offset is taken as UTC (loggers that write local time without saying so cannot be fixed here).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Final

import numpy as np
import pyarrow as pa

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US: Final = dt.timedelta(microseconds=1)


def iso_to_us(text: str) -> int:
    """One RFC 3339 / ISO 8601 timestamp to epoch microseconds (``ValueError`` if malformed)."""
    stamp = dt.datetime.fromisoformat(text.strip())
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return (stamp - _EPOCH) // _US


def any_to_us(value: object) -> int:
    """An envelope ``ts``: RFC 3339 string, or a number of milliseconds since the epoch."""
    if isinstance(value, str):
        return iso_to_us(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"unsupported timestamp {value!r}")
    return round(value * 1000)


def many_iso_to_us(texts: Iterable[str]) -> list[int]:
    """Vector form of :func:`iso_to_us`."""
    return [iso_to_us(t) for t in texts]


def us_to_iso(us: int) -> str:
    """Epoch microseconds to RFC 3339 with ``Z``: milliseconds, or microseconds when needed."""
    stamp = _EPOCH + dt.timedelta(microseconds=us)
    frac = f"{stamp.microsecond // 1000:03d}" if us % 1000 == 0 else f"{stamp.microsecond:06d}"
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + frac + "Z"


def iso_strings(ts: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """RFC 3339 strings (microseconds, ``Z``) for a UTC timestamp column, vectorised."""
    us = ts.cast(pa.int64()).to_numpy(zero_copy_only=False).astype("datetime64[us]")
    out: np.ndarray = np.char.add(np.datetime_as_string(us, unit="us"), "Z")
    return out
