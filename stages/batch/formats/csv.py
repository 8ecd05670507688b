"""CSV sessions: the canonical column set and the ``racelog`` vendor layout; reader and writer.

Canonical layout (header names exactly, any order, unknown columns ignored)::

    ts,lat_deg,lon_deg,alt_m,speed_mps,course_deg,hdop,fix_quality,sats,
    ax_mps2,ay_mps2,az_mps2,gx_rps,gy_rps,gz_rps,aux.<channel>...

``ts`` is RFC 3339 (``2024-05-01T10:00:00.125Z``; no offset means UTC); units and the FLU
frame are those of :mod:`stages.batch.canonical`. A row is a GNSS sample when ``lat_deg``
and ``lon_deg`` are filled, an IMU sample when all six IMU cells are filled, and every filled
``aux.<channel>`` cell is one AUX value; blank cells mean "no sample of that sensor".

``racelog`` layout (a RaceBox-style logger export; we convert its names and units)::

    time_ms,latitude,longitude,altitude_m,speed_kmh,heading_deg,sats,hdop,fix_type,
    acc_x_g,acc_y_g,acc_z_g,gyro_x_dps,gyro_y_dps,gyro_z_dps,temp_f

``time_ms`` is milliseconds since the Unix epoch (UTC); speed km/h; acceleration in g and
rates in deg/s in the FRD frame (x forward, y right, z down, so a level logger at rest reads
``acc_z_g`` = -1); ``temp_f`` °F; ``fix_type`` is u-blox style (0 no fix, 1 dead reckoning,
2 2D, 3 3D, 4 GNSS + dead reckoning, 5 time only) and rows with 0 or 5 carry no GNSS sample.
The reader keeps source units (``ParsedSession.units``); ``normalise_units`` converts.

A CSV Arrow refuses is ``CORRUPT_ARTIFACT`` with a message naming the line, the column and the
kind of problem (``line 7, column 'lat_deg': not a number``), never the cell: any cell may be a
coordinate, and the message is stored with the job attempt (spec 000 §15).
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Mapping
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.csv_layout import (
    AUX_PREFIX,
    CANONICAL,
    FIX_TYPE_QUALITY,
    IMU_COLS,
    Layout,
    detect_layout,
    header,
)
from stages.batch.formats.csv_writer import write
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec, Head, Sniffed, dateless

__all__ = ["SPEC", "read", "sniff", "write"]


def _load(data: bytes, names: list[str], layout: Layout) -> pa.Table:
    if len(set(names)) != len(names):
        raise SessionStageError("CSV header repeats a column", code=codes.CORRUPT_ARTIFACT)
    wanted = [
        n
        for n in names
        if n in layout.columns
        or n == layout.fix_column
        or (layout.name == CANONICAL and n.startswith(AUX_PREFIX))
    ]
    types = dict.fromkeys(wanted, pa.float64())
    types[layout.time_column] = pa.float64() if layout.epoch_ms else canonical.TS_TYPE
    try:
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
            convert_options=pacsv.ConvertOptions(
                column_types=types, include_columns=[layout.time_column, *wanted]
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SessionStageError(
            f"CSV cannot be parsed: {_unparseable(data, names, types, exc)}",
            code=codes.CORRUPT_ARTIFACT,
        ) from None


# Arrow's texts quote the cell ("invalid value '51.12x'") or the whole row ("Expected 3
# columns, got 4: <the row>"): only their shape is read from them, and the message says
# where and what kind of problem instead.
_CONVERSION: Final = re.compile(r"In CSV column #(\d+): CSV conversion error to ")
_RAGGED: Final = re.compile(r"Expected (\d+) columns, got (\d+)")


def _unparseable(
    data: bytes, names: list[str], types: dict[str, pa.DataType], exc: Exception
) -> str:
    """Why Arrow refused the CSV, by line, column and kind of problem; never the cell."""
    text = str(exc)
    conversion = _CONVERSION.match(text)
    if conversion is not None and int(conversion[1]) < len(names):
        column = names[int(conversion[1])]
        target = types.get(column, pa.float64())
        kind = (
            "not an RFC 3339 time with a UTC offset"
            if pa.types.is_timestamp(target)
            else "not a number"
        )
        row = _first_unconvertible(data, names, column, target)
        where = "" if row is None else f"line {row + 2}, "  # the header is line 1
        return f"{where}column '{column}': {kind}"
    ragged = _RAGGED.search(text)
    if ragged is not None:
        line = _first_ragged_line(data, names)
        where = "" if line is None else f"line {line}: "
        return f"{where}expected {ragged[1]} columns, found {ragged[2]}"
    return text.split(":", 1)[0]  # Arrow's kind of error; what follows may quote the data


def _first_unconvertible(
    data: bytes, names: list[str], column: str, target: pa.DataType
) -> int | None:
    """The index of the first data row whose ``column`` cell Arrow cannot convert to
    ``target``: the column read as text, and the casts that fail halved down to one row."""
    strings = (
        pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
            convert_options=pacsv.ConvertOptions(
                column_types={column: pa.string()},
                include_columns=[column],
                strings_can_be_null=True,  # the null spellings, as in the typed read
            ),
        )
        .column(0)
        .combine_chunks()
    )

    def fails(start: int, stop: int) -> bool:
        try:
            pc.cast(strings.slice(start, stop - start), target)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return True
        return False

    low, high = 0, len(strings)
    if not fails(low, high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if fails(low, middle):
            high = middle
        else:
            low = middle
    return low


def _first_ragged_line(data: bytes, names: list[str]) -> int | None:
    """The line of the first row with the wrong number of cells, as Arrow counts lines (the
    header is line 1; blank lines are skipped uncounted): a single-threaded read numbers them."""
    found: list[int] = []

    def note(row: pacsv.InvalidRow) -> str:
        if row.number is not None:
            found.append(row.number)
        return "error"

    with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError):  # the row, found above
        pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=note),
            convert_options=pacsv.ConvertOptions(
                column_types={names[0]: pa.string()}, include_columns=[names[0]]
            ),
        )
    return found[0] if found else None


def _timestamps(table: pa.Table, layout: Layout) -> pa.Array:
    col = table.column(layout.time_column).combine_chunks()
    if not layout.epoch_ms:
        return col
    us = pc.round(pc.multiply(col, 1000.0))
    try:
        return pc.cast(us, pa.int64()).cast(canonical.TS_TYPE)
    except pa.ArrowInvalid:  # its text quotes the time: name the line instead
        row = pc.index(pc.invert(pc.less(pc.abs(us), 2.0**63)), True).as_py()
        where = "" if row < 0 else f"line {row + 2}, "  # the header is line 1
        raise SessionStageError(
            f"CSV cannot be parsed: {where}column '{layout.time_column}': a time out of range",
            code=codes.CORRUPT_ARTIFACT,
        ) from None


def read(data: bytes) -> ParsedSession:
    """Parse a canonical or ``racelog`` CSV into GNSS / IMU / AUX streams (source units)."""
    names = header(data)
    layout = detect_layout(names)
    if layout is None:
        raise SessionStageError(
            "CSV header matches no known layout", code=codes.UNSUPPORTED_FORMAT
        )
    raw = _load(data, names, layout)
    ts = _timestamps(raw, layout)
    timed = pc.is_valid(ts)
    table = raw.filter(timed).set_column(0, "ts", ts.filter(timed))
    by_stream: dict[str, dict[str, pa.ChunkedArray]] = {canonical.GNSS: {}, canonical.IMU: {}}
    units: dict[str, dict[str, str]] = {canonical.GNSS: {}, canonical.IMU: {}, canonical.AUX: {}}
    aux_cols: dict[str, str] = {}
    for src in table.column_names[1:]:
        if src.startswith(AUX_PREFIX) and layout.name == CANONICAL:
            aux_cols[src] = src[len(AUX_PREFIX) :]
            continue
        if src not in layout.columns:
            continue
        stream, col, unit = layout.columns[src]
        if stream == canonical.AUX:
            aux_cols[src] = col
            if unit != canonical.AUX_UNITS.get(col, unit):
                units[stream][col] = unit
            continue
        by_stream[stream][col] = table.column(src)
        if unit != canonical.CANONICAL_UNITS[stream][col]:
            units[stream][col] = unit
    gnss = _gnss(table, by_stream[canonical.GNSS], layout)
    imu_cols = by_stream[canonical.IMU]
    if set(imu_cols) == set(IMU_COLS):
        mask = pc.and_(*(pc.is_valid(imu_cols[c]) for c in IMU_COLS[:2]))
        for c in IMU_COLS[2:]:
            mask = pc.and_(mask, pc.is_valid(imu_cols[c]))
        imu = pa.table({"ts": table.column("ts"), **imu_cols}).filter(mask)
        partial = pc.sum(pc.is_valid(imu_cols["ax_mps2"])).as_py() or 0
        partial -= imu.num_rows
    else:
        imu, partial = canonical.empty(canonical.IMU), 0
    aux = _aux(table, aux_cols)
    stats = {
        "layout": layout.name,
        "rows": raw.num_rows,
        "rows_without_time": raw.num_rows - table.num_rows,
        "gnss_rows": gnss.num_rows,
        "imu_rows": imu.num_rows,
        "partial_imu_rows": partial,
        "aux_values": aux.num_rows,
    }
    streams = {canonical.AUX: canonical.conform(canonical.AUX, aux)}
    if {"lat_deg", "lon_deg"} <= set(by_stream[canonical.GNSS]):
        streams[canonical.GNSS] = canonical.conform(canonical.GNSS, gnss)
    if set(imu_cols) == set(IMU_COLS):
        streams[canonical.IMU] = canonical.conform(canonical.IMU, imu)
    return ParsedSession(
        streams=streams,
        units={k: v for k, v in units.items() if v},
        imu_frame=layout.imu_frame,
        stats=stats,
    )


def _gnss(table: pa.Table, cols: dict[str, pa.ChunkedArray], layout: Layout) -> pa.Table:
    if "lat_deg" not in cols or "lon_deg" not in cols:
        return canonical.empty(canonical.GNSS)
    mask = pc.and_(pc.is_valid(cols["lat_deg"]), pc.is_valid(cols["lon_deg"]))
    out = {"ts": table.column("ts"), **cols}
    if layout.fix_column is not None and layout.fix_column in table.column_names:
        fix = table.column(layout.fix_column).to_numpy(zero_copy_only=False)
        fix = np.nan_to_num(fix, nan=0.0).astype(np.int64).clip(0, len(FIX_TYPE_QUALITY) - 1)
        quality = FIX_TYPE_QUALITY[fix]
        mask = pc.and_(mask, pa.array(quality > 0))
        out["fix_quality"] = pa.chunked_array([pa.array(quality)])
    for name, typ in (("sats", pa.int16()), ("fix_quality", pa.int8())):
        if name in out and pa.types.is_floating(out[name].type):
            out[name] = pc.cast(pc.round(out[name]), typ)
    return pa.table(out).filter(mask)


def _aux(table: pa.Table, aux_cols: dict[str, str]) -> pa.Table:
    parts = []
    for src, channel in aux_cols.items():
        col = table.column(src)
        mask = pc.is_valid(col)
        n = pc.sum(mask).as_py() or 0
        parts.append(
            pa.table(
                {
                    "ts": table.column("ts").filter(mask),
                    "channel": pa.array([channel] * n, pa.string()),
                    "value": col.filter(mask),
                }
            )
        )
    if not parts:
        return canonical.empty(canonical.AUX)
    return pa.concat_tables(parts).sort_by([("ts", "ascending")])


def sniff(head: Head) -> Sniffed | None:
    """A text head is CSV when its header matches a known layout (:mod:`.csv_layout`)."""
    if head.shape != "text":
        return None
    names = header(head.body)
    layout = detect_layout(names)
    if layout is None:
        return None
    streams: tuple[str, ...] = ()
    gnss_cols = {src for src, (s, _, _) in layout.columns.items() if s == "gnss"}
    if gnss_cols & set(names):
        streams += ("gnss",)
    imu_src = {src for src, (s, _, _) in layout.columns.items() if s == "imu"}
    if imu_src <= set(names) and len(imu_src) == len(IMU_COLS):
        streams += ("imu",)
    aux = [n for n in names if n.startswith(AUX_PREFIX)] + [
        n for n in names if n in layout.columns and layout.columns[n][0] == "aux"
    ]
    if aux:
        streams += ("aux",)
    return Sniffed(
        format="csv",
        variant=layout.name,
        streams=streams,
        imu_frame=layout.imu_frame if "imu" in streams else None,
        hints={"columns": len(names), "aux_columns": aux},
    )


def _write(streams: Mapping[str, pa.Table], /, *, variant: str | None) -> bytes:
    return write(streams, layout=variant or CANONICAL)


SPEC: Final = FormatSpec(
    name="csv",
    media_type="text/csv",
    extensions=frozenset({"csv", "txt"}),
    sniff=sniff,
    sniff_priority=50,  # after NMEA, which reads text heads too
    read=dateless(read),
    write=_write,
)
