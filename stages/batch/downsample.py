"""Jobs ``downsample_L0`` / ``downsample_L1`` / ``downsample_L2``: the series pyramid.

Theory of operation
-------------------
``L0`` is the aligned canonical series itself, with the only cleaning charts need: rows
whose timestamp is null are dropped (``time_align`` output has none, but L0 also accepts
un-aligned tables and then sorts them by time). ``L1`` (interactive charts) and ``L2``
(overviews) *select* original rows, never average them, so every level has the canonical
schema and every kept value really was measured. The time axis is cut into buckets of
``bucket_s`` seconds (defaults :data:`DEFAULT_BUCKET_S`, widened so a level never exceeds
:data:`MAX_BUCKETS` buckets); per bucket the first and last rows are kept, plus, for every
*key column* (GNSS ``speed_mps``/``alt_m``, every IMU axis, AUX ``value`` per channel), the
rows holding its minimum and maximum. A peak is therefore never lost: the top speed of any
interval in L1/L2 equals the top speed in L0 (the peak row and its timestamp survive).

Config (optional): ``config["downsample"] = {"L1_bucket_s": 0.5, "L2_bucket_s": 5.0}``.
Inputs: ``<stream>_L0`` if present, else ``<stream>`` (the ``time_align`` outputs), and for
L2 finally ``<stream>_L1`` (the DAG may feed L2 from L1 alone).
Datasets: ``gnss_L0``/``imu_L0``/``aux_L0`` (and ``_L1``, ``_L2``).
Summary: ``level``, ``bucket_s`` (per stream, None for L0), ``rows_in``, ``rows_out``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.run_config import DownsampleConfig
from stages.batch import canonical
from stages.batch.contract import StageInput, StageOutput, run_config

DEFAULT_BUCKET_S: Final = {
    "L1": DownsampleConfig().L1_bucket_s, "L2": DownsampleConfig().L2_bucket_s,
}
MAX_BUCKETS: Final = {"L1": 20_000, "L2": 2_000}
KEY_COLUMNS: Final = {
    canonical.GNSS: ("speed_mps", "alt_m"),
    canonical.IMU: tuple(canonical.CANONICAL_UNITS[canonical.IMU]),
    canonical.AUX: ("value",),
}


def _source(inp: StageInput, stream: str, level: str) -> pa.Table:
    # L2 may be fed L1 only (its DAG dependency): L1 buckets nest in L2 buckets and keep
    # every bucket's extremes, so selecting from L1 keeps the same peaks.
    names = [canonical.level_name(stream, "L0"), stream]
    if level == "L2":
        names.append(canonical.level_name(stream, "L1"))
    for name in names:
        table = inp.datasets.get(name)
        if table is not None:
            return canonical.conform(stream, table)
    return canonical.empty(stream)


def _bucket_s(config: Mapping[str, Any], level: str) -> float:
    sizes = run_config(config).downsample
    return sizes.L1_bucket_s if level == "L1" else sizes.L2_bucket_s


def select_extremes(group: np.ndarray, columns: list[np.ndarray]) -> np.ndarray:
    """Indices to keep: first/last of each run of equal ``group`` ids, plus per column the
    first row holding the run's minimum and maximum (NaN ignored). ``group`` must be sorted."""
    n = len(group)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    ends = np.concatenate((starts[1:], [n])) - 1
    run_of = np.repeat(np.arange(len(starts)), np.diff(np.concatenate((starts, [n]))))
    keep = np.zeros(n, dtype=bool)
    keep[starts] = True
    keep[ends] = True
    index = np.arange(n)
    for values in columns:
        finite = ~np.isnan(values)
        if not finite.any():
            continue
        for reduce in (np.fmax, np.fmin):  # the f-variants skip NaN (null) values
            best = reduce.reduceat(values, starts)
            hit = finite & (values == best[run_of])
            first = np.minimum.reduceat(np.where(hit, index, n), starts)
            keep[first[first < n]] = True
    return np.flatnonzero(keep)


def _floats(table: pa.Table, col: str) -> np.ndarray:
    out: np.ndarray = pc.cast(table.column(col), pa.float64()).to_numpy(zero_copy_only=False)
    return out


def _downsample(
    stream: str, table: pa.Table, bucket_s: float, level: str
) -> tuple[pa.Table, float]:
    if table.num_rows == 0:
        return table, bucket_s
    ts = table.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False)
    span_s = (int(ts.max()) - int(ts.min())) / 1e6
    bucket_s = max(bucket_s, span_s / MAX_BUCKETS[level])
    bucket = (ts - ts.min()) // max(round(bucket_s * 1e6), 1)
    if stream == canonical.AUX:
        channel = pc.dictionary_encode(table.column("channel")).combine_chunks()
        codes = channel.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.lexsort((np.arange(len(ts)), codes))  # by channel, time order inside
        group = codes[order] * (int(bucket.max()) + 1) + bucket[order]
        picked = order[select_extremes(group, [_floats(table, "value")[order]])]
        return table.take(np.sort(picked)), bucket_s
    cols = [_floats(table, c) for c in KEY_COLUMNS[stream]]
    return table.take(select_extremes(bucket, cols)), bucket_s


def _run(inp: StageInput, level: str) -> StageOutput:
    datasets: dict[str, pa.Table] = {}
    bucket: dict[str, float | None] = {}
    rows_in: dict[str, int] = {}
    for stream in canonical.STREAMS:
        table = _source(inp, stream, level)
        rows_in[stream] = table.num_rows
        table = table.filter(pc.is_valid(table.column("ts")))
        ts = table.column("ts")
        if table.num_rows > 1 and not pc.all(pc.greater_equal(ts[1:], ts[:-1])).as_py():
            table = table.sort_by([("ts", "ascending")])
        if level == "L0":
            out, size = table, None
        else:
            out, size = _downsample(stream, table, _bucket_s(inp.config, level), level)
        datasets[canonical.level_name(stream, level)] = out
        bucket[stream] = size
    return StageOutput(
        datasets=datasets,
        summary={
            "level": level,
            "bucket_s": bucket,
            "rows_in": rows_in,
            "rows_out": {s: datasets[canonical.level_name(s, level)].num_rows for s in rows_in},
        },
    )


def run_l0(inp: StageInput) -> StageOutput:
    """Level 0: the canonical series, time-sorted, null timestamps dropped."""
    return _run(inp, "L0")


def run_l1(inp: StageInput) -> StageOutput:
    """Level 1: min/max-per-bucket selection for interactive charts (0.5 s buckets)."""
    return _run(inp, "L1")


def run_l2(inp: StageInput) -> StageOutput:
    """Level 2: min/max-per-bucket selection for overviews (5 s buckets)."""
    return _run(inp, "L2")
