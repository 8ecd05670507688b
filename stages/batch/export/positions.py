"""The track a session's GPX and FIT exports draw: where the vehicle was at each GNSS fix, and
which lap each fix belongs to.

One point per valid fix of the run's ``gnss`` (the rows :func:`stages.batch.geo.valid_fix_rows`
keeps: the receiver's rate, which is what video-overlay tools expect). Where fusion ran, the
point's position and speed are the ``fused`` estimate at the fix's time (linearly between
``fused`` rows, which are 10 ms apart at 100 Hz): the smoothed position the laps were timed
on, without the fix's metres of noise. Altitude, course, HDOP and satellites stay the fix's own
(``fused`` has no altitude, and its heading is the vehicle's yaw, not its course).

:func:`lap_segments` cuts the points into pieces by the laps' crossings: a point at or after a
lap's start crossing and before its end crossing is that lap's; points outside every lap (the
out lap before the first crossing, the in lap after the last) are pieces of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stages.batch import canonical
from stages.batch.formats.gpx import TrackSegment
from stages.batch.geo import IntArray, column_f64, ts_micros, valid_fix_rows

__all__ = ["ExportTrack", "export_track", "lap_segments"]


@dataclass(frozen=True, kw_only=True)
class ExportTrack:
    """The points of an export: a canonical ``gnss`` table, time-sorted, one row per fix."""

    gnss: pa.Table
    source: str
    """``fused`` when the positions and speeds are fusion's, else ``gnss``."""


def export_track(datasets: Mapping[str, pa.Table]) -> ExportTrack:
    """The export's points from the run's ``gnss`` and, when fusion ran, ``fused``."""
    gnss = datasets.get(canonical.GNSS, canonical.empty(canonical.GNSS))
    points = gnss.take(pa.array(valid_fix_rows(gnss)))
    fused = datasets.get("fused")
    if fused is None or fused.num_rows < 2 or points.num_rows == 0:
        return ExportTrack(gnss=points, source=canonical.GNSS)
    at = ts_micros(points).astype(np.float64)
    ts = ts_micros(fused).astype(np.float64)
    inside = (at >= ts[0]) & (at <= ts[-1])
    for name in ("lat_deg", "lon_deg", "speed_mps"):
        own = column_f64(points, name)
        values = column_f64(fused, name)
        ok = np.isfinite(values)
        if not ok.any():
            continue
        estimate = np.interp(at, ts[ok], values[ok])
        column = np.where(inside, estimate, own)
        field = points.schema.field(name)
        array = pa.array(column, field.type, mask=~np.isfinite(column))
        points = points.set_column(points.schema.get_field_index(name), field, array)
    return ExportTrack(gnss=points, source="fused")


def lap_segments(ts_us: IntArray, laps: pa.Table | None) -> tuple[TrackSegment, ...]:
    """The pieces of a time-sorted series ``ts_us`` by the laps' crossings (see the module
    docstring); one piece of every point when there are no laps, none when no points."""
    label = np.zeros(ts_us.size, dtype=np.int64)  # 0: outside every lap
    if laps is not None and laps.num_rows:
        starts, ends = ts_micros(laps, "start_ts"), ts_micros(laps, "end_ts")
        numbers = laps.column("lap").to_numpy(zero_copy_only=False)
        for lap, lo, hi in zip(numbers.tolist(), starts.tolist(), ends.tolist(), strict=True):
            label[(ts_us >= lo) & (ts_us < hi)] = lap
    if not ts_us.size:
        return ()
    stops = np.flatnonzero(np.diff(label) != 0) + 1
    bounds = [*stops.tolist(), int(ts_us.size)]
    return tuple(
        TrackSegment(stop=stop, lap=int(label[stop - 1]) or None) for stop in bounds
    )
