"""JSON Lines of Tideway envelopes (a session recorded from the stream): reader and writer.

One envelope per line::

    {"ts": "2024-05-01T10:00:00.125Z" | 1714557600125, "topic": "gnss", "values": {...}}

``ts`` is RFC 3339 or a number of milliseconds since the Unix epoch (UTC). ``topic`` selects
the stream: ``gnss`` and ``imu`` values use the canonical column names and units of
:mod:`stages.batch.canonical` (``lat_deg``, ``speed_mps``, ``ax_mps2``, ...); ``aux``
values become AUX channels under their own key (``{"heart_rate": 151}``); any other topic
``t`` becomes AUX channels ``t.<key>``. Other envelope fields (``device_id``, ``seq``,
``message_id``, ...) are ignored, as are non-numeric values. A GNSS envelope without both
``lat_deg`` and ``lon_deg`` and an IMU envelope missing an axis are counted and dropped.

The fast path decodes the whole file with Arrow's JSON reader; files it cannot type
(for example ``ts`` given as a string on some lines and a number on others) fall back to a
line-by-line decode, which also pinpoints a malformed line: by its number, the field and the
kind of problem, never by quoting it (spec 000 §15).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.jsonl_writer import write
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec, Head, Sniffed, dateless, one_layout
from stages.batch.formats.timeparse import any_to_us

__all__ = ["SPEC", "read", "sniff", "write"]

_GNSS_COLS: Final = tuple(canonical.CANONICAL_UNITS[canonical.GNSS])
_IMU_COLS: Final = tuple(canonical.CANONICAL_UNITS[canonical.IMU])


def _rows_fast(data: bytes) -> pa.Table | None:
    """Arrow's reader: columns ts, topic, values (struct). None when it cannot type the file."""
    try:
        table = pajson.read_json(io.BytesIO(data))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    schema = table.schema
    if not {"ts", "topic", "values"} <= set(schema.names):
        return None
    if not pa.types.is_struct(schema.field("values").type):
        return None
    ts = table.column("ts")
    try:  # a time out of range: the slow path says on which line (Arrow's text quotes it)
        if pa.types.is_integer(ts.type) or pa.types.is_floating(ts.type):
            us = pc.cast(pc.round(pc.multiply(pc.cast(ts, pa.float64()), 1000.0)), pa.int64())
        elif pa.types.is_timestamp(ts.type) or pa.types.is_string(ts.type):
            us = pc.cast(ts, canonical.TS_TYPE).cast(pa.int64())
        else:
            return None
    except pa.ArrowInvalid:
        return None
    if us.null_count:
        return None
    return pa.table({"ts": us, "topic": table.column("topic"), "values": table.column("values")})


def _rows_slow(data: bytes) -> list[tuple[int, str, Mapping[str, Any]]]:
    rows: list[tuple[int, str, Mapping[str, Any]]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append(_envelope(line))
        except ValueError as exc:  # what is wrong with the line, by field and kind
            raise SessionStageError(
                f"line {number} is not a Tideway envelope: {exc}", code=codes.CORRUPT_ARTIFACT
            ) from None
    return rows


def _envelope(line: bytes) -> tuple[int, str, Mapping[str, Any]]:
    """One line's ``(ts µs, topic, values)``; ``ValueError`` naming the field and the kind of
    problem, never a value (a line's values may be coordinates, and the message is stored with
    the job attempt)."""
    try:
        env = orjson.loads(line)
    except orjson.JSONDecodeError as exc:  # the decoder's text: the kind and the position
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(env, dict):
        raise ValueError("not a JSON object")
    for field in ("ts", "topic"):
        if field not in env:
            raise ValueError(f"'{field}' is missing")
    try:
        ts = any_to_us(env["ts"])
    except ValueError as exc:
        raise ValueError(f"'ts' is {exc}") from None
    values = env.get("values")
    return ts, str(env["topic"]), values if isinstance(values, Mapping) else {}


def _slow_to_table(rows: list[tuple[int, str, Mapping[str, Any]]]) -> pa.Table:
    keys = sorted({k for _, _, v in rows for k, x in v.items() if _is_number(x)})
    values = (
        pa.StructArray.from_arrays(
            [
                pa.array(
                    [float(v[k]) if _is_number(v.get(k)) else None for _, _, v in rows],
                    pa.float64(),
                )
                for k in keys
            ],
            names=keys,
        )
        if keys
        else pa.array([{}] * len(rows), pa.struct([]))
    )
    return pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "topic": pa.array([r[1] for r in rows], pa.string()),
            "values": values,
        }
    )


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _field(values: pa.ChunkedArray, name: str) -> pa.ChunkedArray | None:
    if name not in {f.name for f in values.type}:
        return None
    col = pc.struct_field(values, name)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        return pc.cast(col, pa.float64())
    return None


def read(data: bytes) -> ParsedSession:
    """Parse Tideway envelopes into GNSS / IMU / AUX streams (canonical units)."""
    rows = _rows_fast(data)
    if rows is None:
        rows = _slow_to_table(_rows_slow(data))
    counts: Counter[str] = Counter(envelopes=rows.num_rows)
    topic = rows.column("topic")
    streams: dict[str, pa.Table] = {}
    for stream, cols, required in (
        (canonical.GNSS, _GNSS_COLS, ("lat_deg", "lon_deg")),
        (canonical.IMU, _IMU_COLS, _IMU_COLS),
    ):
        part = rows.filter(pc.equal(topic, stream))
        if part.num_rows == 0:
            continue
        values = part.column("values")
        out: dict[str, Any] = {"ts": part.column("ts").cast(canonical.TS_TYPE)}
        for col in cols:
            field = _field(values, col)
            if field is not None:
                out[col] = field
        if not set(required) <= set(out):
            counts[f"{stream}_dropped"] += part.num_rows
            streams[stream] = canonical.empty(stream)
            continue
        table = pa.table(out)
        mask = pc.is_valid(table.column(required[0]))
        for col in required[1:]:
            mask = pc.and_(mask, pc.is_valid(table.column(col)))
        kept = table.filter(mask)
        counts[f"{stream}_dropped"] += table.num_rows - kept.num_rows
        for name, typ in (("fix_quality", pa.int8()), ("sats", pa.int16())):
            if name in kept.column_names:
                idx = kept.column_names.index(name)
                kept = kept.set_column(idx, name, pc.cast(pc.round(kept.column(name)), typ))
        streams[stream] = canonical.conform(stream, kept)
    streams[canonical.AUX] = _aux(rows, counts)
    counts.update({f"{s}_rows": t.num_rows for s, t in streams.items()})
    return ParsedSession(streams=streams, stats=dict(sorted(counts.items())))


def _aux(rows: pa.Table, counts: Counter[str]) -> pa.Table:
    topic = rows.column("topic")
    part = rows.filter(pc.invert(pc.is_in(topic, pa.array([canonical.GNSS, canonical.IMU]))))
    counts["aux_envelopes"] = part.num_rows
    pieces = []
    values = part.column("values")
    for t in sorted(pc.unique(part.column("topic")).drop_null().to_pylist()):
        in_topic = pc.equal(part.column("topic"), t)
        for f in values.type:
            col = _field(values, f.name)
            if col is None:
                continue
            mask = pc.and_(in_topic, pc.is_valid(col))
            n = pc.sum(mask).as_py() or 0
            if not n:
                continue
            channel = f.name if t == canonical.AUX else f"{t}.{f.name}"
            pieces.append(
                pa.table(
                    {
                        "ts": part.column("ts").filter(mask).cast(canonical.TS_TYPE),
                        "channel": pa.array([channel] * n, pa.string()),
                        "value": col.filter(mask),
                    }
                )
            )
    if not pieces:
        return canonical.empty(canonical.AUX)
    return canonical.conform(canonical.AUX, pa.concat_tables(pieces).sort_by("ts"))


def sniff(head: Head) -> Sniffed | None:
    """A ``{`` head is JSON Lines when its complete lines (up to 200) are objects with ``ts``
    and ``topic``; the topics announce the streams."""
    if head.shape != "json":
        return None
    lines = head.body.split(b"\n")
    complete = lines[:-1] if len(lines) > 1 else lines
    topics: set[str] = set()
    for line in complete[:200]:
        if not line.strip():
            continue
        try:
            env = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(env, dict) or "ts" not in env or "topic" not in env:
            return None
        topics.add(str(env["topic"]))
    if not topics:
        return None
    streams: tuple[str, ...] = tuple(s for s in ("gnss", "imu") if s in topics)
    if topics - {"gnss", "imu"}:
        streams += ("aux",)
    return Sniffed(format="jsonl", streams=streams, hints={"topics": sorted(topics)})


SPEC: Final = FormatSpec(
    name="jsonl",
    media_type="application/x-ndjson",
    extensions=frozenset({"jsonl", "ndjson", "json", "log"}),
    sniff=sniff,
    sniff_priority=30,
    read=dateless(read),
    write=one_layout(write),
)
