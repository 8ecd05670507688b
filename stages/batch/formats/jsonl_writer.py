"""Write canonical streams as JSON Lines of Tideway envelopes (see :mod:`.jsonl`).

Envelopes are ordered by time (GNSS before IMU before AUX at equal times); ``ts`` is
RFC 3339 with microseconds; null values are left out of ``values``. An AUX channel
``topic.key`` is written under that topic, any other channel under topic ``aux``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from stages.batch import canonical
from stages.batch.formats.timeparse import iso_strings


def _envelopes(stream: str, table: pa.Table) -> tuple[np.ndarray, list[bytes]]:
    ts_us = table.column("ts").cast(pa.int64()).to_numpy()
    ts_text = iso_strings(table.column("ts")).tolist()
    lines: list[bytes] = []
    if stream == canonical.AUX:
        for ts, ch, v in zip(
            ts_text,
            table.column("channel").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        ):
            topic, _, key = ch.rpartition(".")
            env = {"ts": ts, "topic": topic or canonical.AUX, "values": {key: v}}
            lines.append(orjson.dumps(env))
        return ts_us, lines
    names = table.column_names[1:]
    columns = [table.column(n).to_pylist() for n in names]
    if not any(table.column(n).null_count for n in names):
        # No value to leave out: orjson serialises each whole column at once (numbers carry
        # no commas) and one bytes template per row assembles the lines, ~5x faster than
        # building a dict per row.
        quoted_ts = orjson.dumps(ts_text)[1:-1].split(b",")
        cells = [orjson.dumps(col)[1:-1].split(b",") for col in columns]
        fields = b",".join(b'"%s":%%s' % n.encode() for n in names)
        template = b'{"ts":%s,"topic":"' + stream.encode() + b'","values":{' + fields + b"}}"
        lines = [template % row for row in zip(quoted_ts, *cells, strict=True)]
        return ts_us, lines
    for i, ts in enumerate(ts_text):
        values: dict[str, Any] = {}
        for name, col in zip(names, columns, strict=True):
            if col[i] is not None:
                values[name] = col[i]
        lines.append(orjson.dumps({"ts": ts, "topic": stream, "values": values}))
    return ts_us, lines


def write(streams: Mapping[str, pa.Table]) -> bytes:
    """Serialise ``gnss``/``imu``/``aux`` tables (canonical units) as envelope lines."""
    all_ts: list[np.ndarray] = []
    all_lines: list[bytes] = []
    for stream in canonical.STREAMS:
        table = streams.get(stream)
        if table is None or not table.num_rows:
            continue
        ts, lines = _envelopes(stream, canonical.conform(stream, table))
        all_ts.append(ts)
        all_lines.extend(lines)
    if not all_lines:
        return b""
    order = np.argsort(np.concatenate(all_ts), kind="stable")
    return b"\n".join(all_lines[i] for i in order.tolist()) + b"\n"
