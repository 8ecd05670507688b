"""Write canonical streams as one wide CSV, in the canonical or the ``racelog`` layout.

Rows are the union of all stream timestamps, ascending; a stream without a sample at a row's
time leaves its cells blank. Each stream must have unique timestamps (``time_align`` output
does). ``racelog`` output converts units and the IMU frame back to the vendor's (the inverse
of what ``normalise_units`` does) and writes ``time_ms`` as whole milliseconds.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from stages.batch import canonical
from stages.batch.formats.csv_layout import AUX_PREFIX, CANONICAL, LAYOUTS, Layout
from stages.batch.formats.parsed import FRD
from stages.batch.formats.timeparse import iso_strings
from stages.batch.formats.units import from_canonical

_FLIPPED_IN_FRD = frozenset(("ay_mps2", "az_mps2", "gy_rps", "gz_rps"))


def _scatter(col: pa.ChunkedArray | pa.Array, pos: np.ndarray, n: int) -> pa.Array:
    """Place ``col``'s values at rows ``pos`` of an ``n``-row column, nulls elsewhere."""
    present = np.zeros(n, dtype=bool)
    present[pos] = pc.is_valid(col).to_numpy(zero_copy_only=False)
    values = np.zeros(n, dtype=col.type.to_pandas_dtype())
    values[pos] = col.fill_null(0).to_numpy(zero_copy_only=False)
    return pa.array(values, type=col.type, mask=~present)


def _wide(streams: Mapping[str, pa.Table]) -> pa.Table:
    parts: list[tuple[np.ndarray, dict[str, pa.ChunkedArray]]] = []
    for stream in (canonical.GNSS, canonical.IMU):
        table = streams.get(stream)
        if table is not None and table.num_rows:
            table = canonical.conform(stream, table)
            ts = table.column("ts").cast(pa.int64()).to_numpy()
            parts.append((ts, {c: table.column(c) for c in table.column_names[1:]}))
    aux = streams.get(canonical.AUX)
    if aux is not None and aux.num_rows:
        for channel in sorted(pc.unique(aux.column("channel")).to_pylist()):
            rows = aux.filter(pc.equal(aux.column("channel"), channel))
            ts = rows.column("ts").cast(pa.int64()).to_numpy()
            parts.append((ts, {AUX_PREFIX + channel: rows.column("value")}))
    for ts, _ in parts:
        if (np.diff(np.sort(ts)) == 0).any():
            raise ValueError("each stream needs unique timestamps to be written as CSV")
    union = np.sort(np.concatenate([ts for ts, _ in parts])) if parts else np.zeros(0, np.int64)
    union = union[np.concatenate(([True], np.diff(union) != 0))]
    columns: dict[str, pa.Array] = {"ts": pa.array(union).cast(canonical.TS_TYPE)}
    for ts, cols in parts:
        pos = np.searchsorted(union, ts)
        for name, col in cols.items():
            columns[name] = _scatter(col, pos, len(union))
    return pa.table(columns)


def _to_racelog(wide: pa.Table, layout: Layout) -> pa.Table:
    ms = pc.divide(wide.column("ts").cast(pa.int64()), 1000)
    out: dict[str, pa.Array | pa.ChunkedArray] = {layout.time_column: ms}
    for src, (stream, col, unit) in layout.columns.items():
        name = AUX_PREFIX + col if stream == canonical.AUX else col
        if name not in wide.column_names:
            continue
        column = wide.column(name)
        if pa.types.is_floating(column.type):
            values = from_canonical(column.to_numpy(zero_copy_only=False), unit)
            if layout.imu_frame == FRD and col in _FLIPPED_IN_FRD:
                values = -values
            column = pa.array(values, mask=pc.is_null(column).to_numpy(zero_copy_only=False))
        out[src] = column
    if layout.fix_column and "lat_deg" in wide.column_names:
        has_fix = pc.is_valid(wide.column("lat_deg"))
        out[layout.fix_column] = pc.if_else(
            has_fix, pa.scalar(3, pa.int8()), pa.scalar(0, pa.int8())
        )
    return pa.table(out)


def write(streams: Mapping[str, pa.Table], *, layout: str = CANONICAL) -> bytes:
    """Serialise canonical streams (``gnss``/``imu``/``aux``) as CSV bytes in ``layout``."""
    lay = LAYOUTS[layout]
    wide = _wide(streams)
    if lay.name == CANONICAL:
        table = wide.set_column(0, "ts", pa.array(iso_strings(wide.column("ts"))))
    else:
        table = _to_racelog(wide, lay)
    buf = io.BytesIO()
    buf.write((",".join(table.column_names) + "\n").encode())
    pacsv.write_csv(table, buf, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    return buf.getvalue()
