"""Timestamp parsing shared by the text formats: RFC 3339 / ISO 8601 strings and epoch ms.

Everything becomes integer microseconds since the Unix epoch, UTC. A string without an
offset is taken as UTC (loggers that write local time without saying so cannot be fixed here).
:func:`iso_to_us` raises ``datetime``'s own ``ValueError``, which quotes the text: its callers
never store that text (the JSON Lines reader names the line, the GPX reader counts the point).
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
    """An envelope ``ts``: RFC 3339 string, or a number of milliseconds since the epoch.

    ``ValueError`` otherwise; its message names the kind of problem, never the value.
    """
    try:
        if isinstance(value, str):
            return iso_to_us(value)
        if not isinstance(value, bool) and isinstance(value, int | float):
            us = round(value * 1000)
            if -(2**63) <= us < 2**63:  # what an int64 column of microseconds holds
                return us
            raise OverflowError
    except (ValueError, OverflowError):  # their texts quote the value
        problem = "not an RFC 3339 time or a number of epoch milliseconds in range"
        raise ValueError(problem) from None
    raise ValueError("neither an RFC 3339 string nor a number of epoch milliseconds")


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
