"""Every file a session exports, declared once: :data:`EXPORTS`.

An :class:`ExportFile` names the file (``laps.csv``: also its name in the API's path and the
CLI's ``--format``/``--what``), its media type, the datasets it cannot be made without
(``needs``), those it uses when the run has them (``uses``) and its pure writer. The view reads
exactly ``needs`` and ``uses`` from the active run and refuses, naming the dataset, when one of
``needs`` is missing; the CLI's choices, the API's path parameter and the console's links are
made from this table.

The session files (``session.gpx``, ``session.fit``) carry the track of
:mod:`stages.batch.export.positions` with the laps: GPX 1.1 as one ``<trk>`` with one
``<trkseg>`` per lap (the points before the first and after the last crossing in segments of
their own; a lap's segment names it in a ``<tideway:lap>`` extension), FIT as an activity
(records at 1 Hz, one ``lap`` message per lap with its exact time, a session and an activity).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa

from stages.batch import canonical
from stages.batch.export.lap_csv import delta_csv, laps_csv, sectors_csv
from stages.batch.export.positions import export_track, lap_segments
from stages.batch.formats import fit_writer, gpx
from stages.batch.geo import column_f64, travelled, ts_micros

__all__ = ["EXPORTS", "ExportFile", "export_names"]

Writer = Callable[[Mapping[str, pa.Table]], bytes]


@dataclass(frozen=True, kw_only=True)
class ExportFile:
    """One export file of a session (see the module docstring)."""

    name: str
    what: str
    """What it holds: ``laps``, ``sectors``, ``delta`` or ``session`` (the track and laps)."""
    format: str
    """``csv``, ``gpx`` or ``fit`` (the name's suffix)."""
    media_type: str
    needs: tuple[str, ...]
    uses: tuple[str, ...]
    write: Writer
    binary: bool = False
    description: str


def _laps(tables: Mapping[str, pa.Table]) -> bytes:
    return laps_csv(tables["laps"], tables.get("lap_metrics"))


def _track_and_laps(tables: Mapping[str, pa.Table]) -> tuple[pa.Table, pa.Table | None]:
    track = export_track(tables)
    return track.gnss, tables.get("laps")


def _gpx(tables: Mapping[str, pa.Table]) -> bytes:
    points, laps = _track_and_laps(tables)
    segments = lap_segments(ts_micros(points), laps)
    count = sum(1 for s in segments if s.lap is not None)
    desc = (f"{count} laps: one track segment per lap, the points outside laps in segments of "
            "their own" if count else None)  # fmt: skip
    streams = {canonical.GNSS: points}
    if canonical.AUX in tables:
        streams[canonical.AUX] = tables[canonical.AUX]
    return gpx.write(streams, segments=segments, name="Tideway session", description=desc)


def _fit(tables: Mapping[str, pa.Table]) -> bytes:
    points, laps = _track_and_laps(tables)
    metrics = {m["lap"]: m for m in tables["lap_metrics"].to_pylist()} if (
        "lap_metrics" in tables) else {}  # fmt: skip
    fit_laps = [
        fit_writer.FitLap(
            start_us=int(pa.scalar(lap["start_ts"], canonical.TS_TYPE).value),
            end_us=int(pa.scalar(lap["end_ts"], canonical.TS_TYPE).value),
            time_s=lap["lap_time_s"], distance_m=lap["distance_m"],
            avg_speed_mps=metrics.get(lap["lap"], {}).get("avg_speed_mps"),
            max_speed_mps=metrics.get(lap["lap"], {}).get("max_speed_mps"))
        for lap in (laps.sort_by("lap").to_pylist() if laps is not None else [])
    ]  # fmt: skip
    ts = ts_micros(points)
    moved = travelled((ts - ts[0]) / 1e6, column_f64(points, "speed_mps")) if ts.size else None
    distance = float(moved[-1]) if moved is not None and np.isfinite(moved[-1]) else None
    streams = {canonical.GNSS: points}
    if canonical.AUX in tables:
        streams[canonical.AUX] = tables[canonical.AUX]
    return fit_writer.write_activity(streams, fit_laps, distance_m=distance)


_TRACK_USES: Final = ("fused", canonical.AUX, "laps", "lap_metrics")

EXPORTS: Final[Mapping[str, ExportFile]] = {
    f.name: f
    for f in (
        ExportFile(name="laps.csv", what="laps", format="csv", media_type="text/csv",
                   needs=("laps",), uses=("lap_metrics",), write=_laps,
                   description="one row per lap: crossings, lap time and its sigma, delta to "
                   "the best valid lap, rolling best, validity and pit flags, distance, speeds"),
        ExportFile(name="sectors.csv", what="sectors", format="csv", media_type="text/csv",
                   needs=("sector_metrics",), uses=(),
                   write=lambda t: sectors_csv(t["sector_metrics"]),
                   description="one row per lap and sector or mini-sector: where it lies on "
                   "the reference lap, its time and sigma, delta to the best, best flag"),
        ExportFile(name="delta.csv", what="delta", format="csv", media_type="text/csv",
                   needs=("lap_delta",), uses=(), write=lambda t: delta_csv(t["lap_delta"]),
                   description="the delta channel: per lap, the time against the reference "
                   "lap over distance along it, with the speed"),
        ExportFile(name="session.gpx", what="session", format="gpx",
                   media_type="application/gpx+xml", needs=(canonical.GNSS,),
                   uses=_TRACK_USES, write=_gpx,
                   description="the track (GPX 1.1): one point per fix with time, elevation "
                   "and speed, one track segment per lap"),
        ExportFile(name="session.fit", what="session", format="fit",
                   media_type="application/vnd.ant.fit", needs=(canonical.GNSS,),
                   uses=_TRACK_USES, write=_fit, binary=True,
                   description="a FIT activity: 1 Hz records, one lap message per lap with "
                   "its exact time, a session and an activity message"),
    )
}  # fmt: skip


def export_names() -> tuple[str, ...]:
    """Every export file's name, in the table's order."""
    return tuple(EXPORTS)
