"""Session file formats: one reader and one writer per format, gzip handled in one place.

``read(fmt, data)`` turns plain (already decompressed) bytes into a
:class:`~stages.batch.formats.parsed.ParsedSession`; ``write(fmt, streams)`` turns canonical
streams back into a file, optionally gzip-compressed (used for synthetic sessions and tests).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Final

import pyarrow as pa

from stages.batch.formats import csv, fit, gpx, jsonl, nmea
from stages.batch.formats.compression import compress
from stages.batch.formats.parsed import ParsedSession

NMEA: Final = "nmea"
GPX: Final = "gpx"
CSV: Final = "csv"
JSONL: Final = "jsonl"
FIT: Final = "fit"
FORMATS: Final = (NMEA, GPX, CSV, JSONL, FIT)

READERS: Final[Mapping[str, Callable[[bytes], ParsedSession]]] = {
    NMEA: nmea.read,
    GPX: gpx.read,
    CSV: csv.read,
    JSONL: jsonl.read,
    FIT: fit.read,
}


def read(fmt: str, data: bytes, *, session_date: dt.date | None = None) -> ParsedSession:
    """Parse plain ``data`` of format ``fmt`` (one of :data:`FORMATS`).

    ``session_date`` (given with the upload) dates an NMEA log that carries no date itself.
    """
    if fmt == NMEA:
        return nmea.read(data, session_date=session_date)
    return READERS[fmt](data)


def write(
    fmt: str,
    streams: Mapping[str, pa.Table],
    *,
    compressed: bool = False,
    variant: str | None = None,
) -> bytes:
    """Serialise canonical ``streams`` as ``fmt``; ``variant`` picks a CSV layout."""
    if fmt == CSV:
        data = csv.write(streams, layout=variant or "canonical")
    elif fmt == NMEA:
        data = nmea.write(streams)
    elif fmt == GPX:
        data = gpx.write(streams)
    elif fmt == JSONL:
        data = jsonl.write(streams)
    elif fmt == FIT:
        data = fit.write(streams)
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return compress(data) if compressed else data
