"""The lap, sector and delta datasets of a run as CSV (``laps.csv``, ``sectors.csv``,
``delta.csv``).

RFC 4180 CSV from the standard library's writer: a header row, then one row per dataset row,
lines ending CRLF. Cells are plain: instants in ISO-8601 UTC to the millisecond
(``2026-05-01T12:00:00.250Z``), times and deltas in seconds to the millisecond (their sigmas
to a tenth of one), distances in
metres to the centimetre, speeds in m/s to the mm/s, booleans ``true``/``false``, and an
unknown value (a null, or a column an older run's dataset does not have) an empty cell. Each
file's columns are declared once below, with the dataset column each one reads.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa

from stages.batch.formats.timeparse import us_to_iso

__all__ = ["DELTA_COLUMNS", "LAP_COLUMNS", "SECTOR_COLUMNS", "delta_csv", "laps_csv",
           "sectors_csv"]  # fmt: skip

Cell = Callable[[Any], str]


def _instant(value: dt.datetime) -> str:
    us = (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    return us_to_iso(round(us / 1000) * 1000)


def _fixed(digits: int) -> Cell:
    return lambda value: f"{float(value):.{digits}f}"


def _flag(value: Any) -> str:
    return "true" if value else "false"


# A time's uncertainty to the tenth of a millisecond: a crossing fit's sigma is a few ms, and
# rounded to the ms a 0.4 ms sigma would read as none.
_SECONDS, _SIGMA, _METRES, _SPEED = _fixed(3), _fixed(4), _fixed(2), _fixed(3)

# (header, the dataset column it reads, how a value is written)
LAP_COLUMNS: Final[tuple[tuple[str, str, Cell], ...]] = (
    ("lap", "lap", str),
    ("start", "start_ts", _instant),
    ("end", "end_ts", _instant),
    ("lap_time_s", "lap_time_s", _SECONDS),
    ("lap_time_sigma_s", "lap_time_sigma_s", _SIGMA),
    ("delta_to_best_s", "delta_to_best_s", _SECONDS),
    ("rolling_best_s", "rolling_best_s", _SECONDS),
    ("is_best", "is_best", _flag),
    ("valid", "valid", _flag),
    ("pit", "pit", _flag),
    ("pit_in", "pit_in", _flag),
    ("pit_out", "pit_out", _flag),
    ("stopped_s", "stopped_s", _SECONDS),
    ("distance_m", "distance_m", _METRES),
    ("max_speed_mps", "max_speed_mps", _SPEED),
    ("avg_speed_mps", "avg_speed_mps", _SPEED),
)
SECTOR_COLUMNS: Final[tuple[tuple[str, str, Cell], ...]] = (
    ("lap", "lap", str),
    ("kind", "kind", str),
    ("sector", "sector", str),
    ("start_m", "start_m", _METRES),
    ("end_m", "end_m", _METRES),
    ("time_s", "time_s", _SECONDS),
    ("sigma_s", "sigma_s", _SIGMA),
    ("delta_to_best_s", "delta_to_best_s", _SECONDS),
    ("is_best", "is_best", _flag),
)
DELTA_COLUMNS: Final[tuple[tuple[str, str, Cell], ...]] = (
    ("lap", "lap", str),
    ("reference_lap", "reference_lap", str),
    ("distance_m", "distance_m", _METRES),
    ("time_s", "time_s", _SECONDS),
    ("delta_s", "delta_s", _SECONDS),
    ("speed_mps", "speed_mps", _SPEED),
)


def _csv(columns: Sequence[tuple[str, str, Cell]], rows: Sequence[Mapping[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)  # RFC 4180: CRLF, quoting only where a cell needs it
    writer.writerow([header for header, _, _ in columns])
    for row in rows:
        writer.writerow(
            ["" if row.get(col) is None else cell(row[col]) for _, col, cell in columns]
        )
    return out.getvalue().encode()


def laps_csv(laps: pa.Table, metrics: pa.Table | None = None) -> bytes:
    """One row per lap of ``laps``, with its timing and speeds from ``lap_metrics`` (empty
    cells without it). A column both have (the lap time, its sigma) is the ``laps`` row's."""
    by_lap = {m["lap"]: m for m in metrics.to_pylist()} if metrics is not None else {}
    rows = []
    for lap in laps.sort_by("lap").to_pylist():
        merged = {**by_lap.get(lap["lap"], {}), **{k: v for k, v in lap.items() if v is not None}}
        rows.append(merged)
    return _csv(LAP_COLUMNS, rows)


def sectors_csv(sectors: pa.Table) -> bytes:
    """One row per lap and sector (``kind`` ``sector``) or mini-sector (``mini``) of the
    ``sector_metrics`` dataset, by lap, kind and sector."""
    order = [("lap", "ascending"), ("kind", "descending"), ("sector", "ascending")]
    return _csv(SECTOR_COLUMNS, sectors.sort_by(order).to_pylist())


def delta_csv(delta: pa.Table) -> bytes:
    """The ``lap_delta`` channel: per lap, the time against the reference lap over distance."""
    return _csv(DELTA_COLUMNS, delta.sort_by([("lap", "ascending"),
                                              ("distance_m", "ascending")]).to_pylist())
