"""Session file formats: one declaration per format, gzip handled in one place.

Each format is one module ending with its :class:`~.spec.FormatSpec` (``SPEC``), listed once
in :data:`REGISTRY`; everything keyed by format is derived from it. ``read(fmt, data)`` turns
plain (already decompressed) bytes into a :class:`~stages.batch.formats.parsed.ParsedSession`;
``write(fmt, streams)`` turns canonical streams back into a file, optionally gzip-compressed
(used for synthetic sessions and tests). Sniffing is :mod:`.sniff`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Final

import pyarrow as pa

from stages.batch.formats import csv, fit, gpx, jsonl, nmea
from stages.batch.formats.compression import compress
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec

REGISTRY: Final[Mapping[str, FormatSpec]] = {
    spec.name: spec for spec in (nmea.SPEC, gpx.SPEC, csv.SPEC, jsonl.SPEC, fit.SPEC)
}
FORMATS: Final = tuple(REGISTRY)
SNIFFING_ORDER: Final = tuple(sorted(REGISTRY.values(), key=lambda spec: spec.sniff_priority))
BAD_INPUT: Final = frozenset(code for spec in REGISTRY.values() for code in spec.bad_input)
"""The codes a format's reader raises that no retry can fix."""


def read(fmt: str, data: bytes, *, session_date: dt.date | None = None) -> ParsedSession:
    """Parse plain ``data`` of format ``fmt`` (one of :data:`FORMATS`).

    ``session_date`` (given with the upload) dates a log that carries no date itself (NMEA).
    """
    return REGISTRY[fmt].read(data, session_date=session_date)


def write(
    fmt: str,
    streams: Mapping[str, pa.Table],
    *,
    compressed: bool = False,
    variant: str | None = None,
) -> bytes:
    """Serialise canonical ``streams`` as ``fmt``; ``variant`` picks a CSV layout."""
    spec = REGISTRY.get(fmt)
    if spec is None:
        raise ValueError(f"unknown format {fmt!r}")
    data = spec.write(streams, variant=variant)
    return compress(data) if compressed else data
