"""Job ``normalise_units``: source units and frames into the canonical ones.

Which columns carry a non-canonical unit comes from the ``parse_raw`` summary's ``units``
map, falling back to each field's ``unit`` metadata (so the stage also works on Parquet read
back without the summary). Conversions are the affine maps of
:mod:`stages.batch.formats.units` (knots, km/h, g, deg/s, °F, ...). An IMU in the FRD frame
(x forward, y right, z down) is turned into FLU by negating the y and z axes of both
acceleration and rate. Only impossible values are cleaned here:

- GNSS rows with a non-finite or out-of-range position, or exactly (0, 0) ("null island", a
  receiver's placeholder), are dropped; negative or non-finite speed/hdop become null;
  course is wrapped into [0, 360);
- IMU rows with a non-finite value, and non-finite AUX values, are dropped.

Datasets: ``gnss``, ``imu``, ``aux`` in canonical units (field ``unit`` metadata canonical).
Summary: ``conversions`` (``"gnss.speed_mps": "kn->m/s"``, ...), ``imu_frame_in``,
``imu_frame`` (always ``FLU``), ``dropped`` (counters), ``nulled`` (counters), ``rows``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.batch.formats.parsed import FLU, FRD
from stages.batch.formats.units import UNITS, to_canonical

_FRD_FLIPPED = ("ay_mps2", "az_mps2", "gy_rps", "gz_rps")


def _floats(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Column as float64 with NaN for nulls."""
    out: np.ndarray = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)
    return out.astype(np.float64, copy=True)


def _units_of(stream: str, table: pa.Table, declared: Mapping[str, Any]) -> dict[str, str]:
    units = dict(declared.get(stream, {}) or {})
    if not units and stream != canonical.AUX:
        for col, unit in canonical.CANONICAL_UNITS[stream].items():
            if col in table.column_names:
                found = canonical.field_unit(table, col)
                if found is not None and found != unit:
                    units[col] = found
    return units


def _convert(values: np.ndarray, unit: str, want: str, where: str) -> np.ndarray:
    if unit not in UNITS or UNITS[unit][0] != want:
        raise SessionStageError(
            f"{where}: cannot convert unit {unit!r} to {want!r}", code=codes.UNSUPPORTED_FORMAT
        )
    return to_canonical(values, unit)


def _gnss(table: pa.Table, units: dict[str, str], counts: dict[str, int]) -> pa.Table:
    cols = {c: _floats(table.column(c)) for c in ("lat_deg", "lon_deg", "alt_m", "speed_mps")}
    cols.update({c: _floats(table.column(c)) for c in ("course_deg", "hdop")})
    for col, unit in units.items():
        want = canonical.CANONICAL_UNITS[canonical.GNSS][col]
        cols[col] = _convert(cols[col], unit, want, f"gnss.{col}")
    lat, lon = cols["lat_deg"], cols["lon_deg"]
    in_range = np.isfinite(lat) & np.isfinite(lon) & (np.abs(lat) <= 90) & (np.abs(lon) <= 180)
    island = (lat == 0.0) & (lon == 0.0)
    keep = in_range & ~island
    counts["gnss_out_of_range"] = int((~in_range).sum())
    counts["gnss_null_island"] = int((in_range & island).sum())
    speed, hdop = cols["speed_mps"], cols["hdop"]
    counts["gnss_speed_nulled"] = int((np.isfinite(speed) & (speed < 0)).sum())
    speed[~(speed >= 0)] = np.nan
    hdop[~(hdop >= 0)] = np.nan
    cols["course_deg"] = np.mod(cols["course_deg"], 360.0)
    out: dict[str, Any] = {"ts": table.column("ts")}
    for name, values in cols.items():
        out[name] = pa.array(values, pa.float64(), from_pandas=True)
    out["fix_quality"] = table.column("fix_quality")
    out["sats"] = table.column("sats")
    return pa.table(out).filter(pa.array(keep))


def _imu(table: pa.Table, units: dict[str, str], frame: str, counts: dict[str, int]) -> pa.Table:
    if frame not in (FLU, FRD):
        raise SessionStageError(f"unknown IMU frame {frame!r}", code=codes.UNSUPPORTED_FORMAT)
    out: dict[str, Any] = {"ts": table.column("ts")}
    keep = np.ones(table.num_rows, dtype=bool)
    for col, want in canonical.CANONICAL_UNITS[canonical.IMU].items():
        values = _floats(table.column(col))
        if col in units:
            values = _convert(values, units[col], want, f"imu.{col}")
        if frame == FRD and col in _FRD_FLIPPED:
            values = -values
        keep &= np.isfinite(values)
        out[col] = values
    counts["imu_non_finite"] = int((~keep).sum())
    return pa.table(out).filter(pa.array(keep))


def _aux(table: pa.Table, units: dict[str, str], counts: dict[str, int]) -> pa.Table:
    values = _floats(table.column("value"))
    channel = table.column("channel")
    for ch, unit in units.items():
        mask = pc.equal(channel, ch).to_numpy(zero_copy_only=False)
        want = UNITS[unit][0] if unit in UNITS else "?"
        want = canonical.AUX_UNITS.get(ch, want)
        values[mask] = _convert(values[mask], unit, want, f"aux.{ch}")
    keep = np.isfinite(values)
    counts["aux_non_finite"] = int((~keep).sum())
    out = pa.table({"ts": table.column("ts"), "channel": channel, "value": values})
    return out.filter(pa.array(keep))


def run(inp: StageInput) -> StageOutput:
    """Convert the ``parse_raw`` streams to canonical units and the FLU frame."""
    parsed = inp.summaries.get("parse_raw", {})
    declared = parsed.get("units", {}) or {}
    frame = str(parsed.get("imu_frame") or FLU)
    dropped: dict[str, int] = {}
    datasets: dict[str, pa.Table] = {}
    conversions: dict[str, str] = {}
    for stream in canonical.STREAMS:
        table = inp.datasets.get(stream)
        table = canonical.empty(stream) if table is None else canonical.conform(stream, table)
        units = _units_of(stream, table, declared)
        for col, unit in units.items():
            target = canonical.AUX_UNITS.get(col) if stream == canonical.AUX else None
            target = target or canonical.CANONICAL_UNITS[stream].get(col) or UNITS.get(unit, "?")[0]
            conversions[f"{stream}.{col}"] = f"{unit}->{target}"
        if stream == canonical.GNSS:
            table = _gnss(table, units, dropped)
        elif stream == canonical.IMU:
            table = _imu(table, units, frame, dropped)
        else:
            table = _aux(table, units, dropped)
        datasets[stream] = canonical.conform(stream, table)
    nulled = {"gnss_speed_negative": dropped.pop("gnss_speed_nulled")}
    return StageOutput(
        datasets=datasets,
        summary={
            "conversions": conversions,
            "imu_frame_in": frame,
            "imu_frame": FLU,
            "dropped": dropped,
            "nulled": nulled,
            "rows": {s: t.num_rows for s, t in datasets.items()},
        },
    )
