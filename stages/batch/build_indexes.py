"""Job ``build_indexes``: query helpers mapping laps and segments to time and row ranges.

Reads ``laps`` / ``lap_metrics`` and ``segments`` plus whichever series datasets are present
among ``gnss``, ``imu`` and ``fused``. Produces:

- ``lap_index``: ``lap``, ``start_ts``, ``end_ts``, ``duration_s``, ``valid`` and, per series
  ``S`` in (gnss, imu, fused), ``S_row_start`` / ``S_row_end`` - the half-open row range of
  that series (sorted by ``ts``, as ``time_align`` leaves it) inside the lap; null when the
  series is absent.
- ``segment_index``: ``segment_id``, ``kind``, ``lap``, ``start_ts``, ``end_ts``,
  ``duration_s`` and the same row ranges.

A reader slices a lap or a corner straight out of a Parquet file by row range, or filters
ClickHouse by the time range, without scanning the session. Summary: ``lap_index_rows``,
``segment_index_rows``, ``series`` (which row ranges are filled) and ``session_start`` /
``session_end`` (ISO-8601, UTC) of the union of the series.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from stages.batch.contract import StageInput, StageOutput
from stages.batch.geo import IntArray, micros_to_ts, ts_micros

LAP_INDEX = "lap_index"
SEGMENT_INDEX = "segment_index"
SERIES = ("gnss", "imu", "fused")


def run(inp: StageInput) -> StageOutput:
    """Build ``lap_index`` and ``segment_index`` (see the module docstring)."""
    series = {name: ts_micros(tab) for name in SERIES
              if (tab := inp.datasets.get(name)) is not None and tab.num_rows > 0}
    laps, segs = inp.datasets.get("laps"), inp.datasets.get("segments")
    lap_index = _index(laps, series, {"lap": pa.int32(), "valid": pa.bool_()})
    seg_index = _index(segs, series, {"segment_id": pa.int32(), "kind": pa.string(),
                                      "lap": pa.int32()})
    starts = [int(ts[0]) for ts in series.values()]
    ends = [int(ts[-1]) for ts in series.values()]
    return StageOutput(
        datasets={LAP_INDEX: lap_index, SEGMENT_INDEX: seg_index},
        summary={
            "lap_index_rows": lap_index.num_rows,
            "segment_index_rows": seg_index.num_rows,
            "series": sorted(series),
            "session_start": _iso(min(starts)) if starts else None,
            "session_end": _iso(max(ends)) if ends else None,
        },
    )


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, tz=UTC).isoformat()


def _index(table: pa.Table | None, series: Mapping[str, IntArray],
           keys: Mapping[str, pa.DataType]) -> pa.Table:
    """Key columns, time range, duration and per-series row ranges of each interval row."""
    rows = table.num_rows if table is not None else 0
    start = ts_micros(table, "start_ts") if table is not None else np.zeros(0, np.int64)
    end = ts_micros(table, "end_ts") if table is not None else np.zeros(0, np.int64)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {}
    for key, typ in keys.items():
        present = table is not None and key in table.column_names
        cols[key] = table.column(key).cast(typ) if table is not None and present else pa.nulls(
            rows, typ)
    cols["start_ts"] = micros_to_ts(start)
    cols["end_ts"] = micros_to_ts(end)
    cols["duration_s"] = pa.array((end - start) / 1e6, type=pa.float64())
    for name in SERIES:
        ts = series.get(name)
        if ts is None:
            cols[f"{name}_row_start"] = pa.nulls(rows, pa.int64())
            cols[f"{name}_row_end"] = pa.nulls(rows, pa.int64())
        else:
            cols[f"{name}_row_start"] = pa.array(np.searchsorted(ts, start).astype(np.int64))
            cols[f"{name}_row_end"] = pa.array(
                np.searchsorted(ts, end, side="right").astype(np.int64))
    return pa.table(cols)
