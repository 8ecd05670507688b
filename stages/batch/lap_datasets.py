"""The Arrow schemas of a session's two lap datasets, each declared once.

``laps`` (written by :mod:`stages.batch.detect_laps`): one row per complete lap with its
crossings, distance, pit/validity flags and the lap time's standard uncertainty.
``sector_times`` (detect_laps): per lap and sector, the time between its two timing lines and
its uncertainty. ``lap_metrics`` (written by :mod:`stages.batch.compute_metrics`): the same
laps with their timing against the best valid lap, the rolling best and their speeds.
``sector_metrics`` (compute_metrics): the sectors and the finer mini-sectors of every lap with
their best. ``lap_delta`` (compute_metrics): each lap's time against the reference lap as a
channel over distance along the reference lap's path. ``corner_metrics`` (compute_metrics):
per lap and corner of the reference lap, braking point, apex and exit speed and the time
gained or lost there. The writers build their tables from these schemas and the readers
(``streams/views/laps.py``) select their columns by them, so a column renamed or retyped here
is renamed for both sides at once.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = [
    "CORNER_METRICS_SCHEMA",
    "LAPS_SCHEMA",
    "LAP_DELTA_SCHEMA",
    "LAP_METRICS_SCHEMA",
    "SECTOR_METRICS_SCHEMA",
    "SECTOR_TIMES_SCHEMA",
]

_TS: Final = pa.timestamp("us", tz="UTC")

LAPS_SCHEMA: Final = pa.schema([
    ("lap", pa.int32()),
    ("start_ts", _TS),
    ("end_ts", _TS),
    ("lap_time_s", pa.float64()),
    ("distance_m", pa.float64()),
    ("pit_in", pa.bool_()),
    ("pit_out", pa.bool_()),
    ("pit", pa.bool_()),
    ("stopped_s", pa.float64()),
    ("valid", pa.bool_()),
    ("lap_time_sigma_s", pa.float64()),
])  # fmt: skip

SECTOR_TIMES_SCHEMA: Final = pa.schema([
    ("lap", pa.int32()),
    ("sector", pa.int32()),
    ("start_ts", _TS),
    ("end_ts", _TS),
    ("time_s", pa.float64()),
    ("sigma_s", pa.float64()),
])  # fmt: skip

LAP_METRICS_SCHEMA: Final = pa.schema([
    ("lap", pa.int32()),
    ("start_ts", _TS),
    ("end_ts", _TS),
    ("lap_time_s", pa.float64()),
    ("delta_to_best_s", pa.float64()),
    ("is_best", pa.bool_()),
    ("valid", pa.bool_()),
    ("pit", pa.bool_()),
    ("max_speed_mps", pa.float64()),
    ("avg_speed_mps", pa.float64()),
    ("distance_m", pa.float64()),
    ("lap_time_sigma_s", pa.float64()),
    ("rolling_best_s", pa.float64()),
])  # fmt: skip

SECTOR_METRICS_SCHEMA: Final = pa.schema([
    ("lap", pa.int32()),
    ("kind", pa.string()),  # "sector" (between timing lines) or "mini" (equal distance)
    ("sector", pa.int32()),
    ("start_m", pa.float64()),  # along the reference lap's path
    ("end_m", pa.float64()),
    ("time_s", pa.float64()),
    ("sigma_s", pa.float64()),
    ("delta_to_best_s", pa.float64()),
    ("is_best", pa.bool_()),
])  # fmt: skip

LAP_DELTA_SCHEMA: Final = pa.schema([
    ("lap", pa.int32()),
    ("reference_lap", pa.int32()),
    ("distance_m", pa.float64()),  # along the reference lap's path from its start line
    ("time_s", pa.float64()),  # since this lap's start crossing
    ("delta_s", pa.float64()),  # time_s minus the reference lap's at the same place
    ("speed_mps", pa.float64()),
])  # fmt: skip

CORNER_METRICS_SCHEMA: Final = pa.schema([
    ("lap", pa.int32()),
    ("corner", pa.int32()),  # n-th corner of the reference lap
    ("reference_lap", pa.int32()),
    ("direction", pa.string()),
    ("start_m", pa.float64()),  # the reference lap's corner, along its path
    ("end_m", pa.float64()),
    ("braking_m", pa.float64()),  # where this lap's speed peaks before the apex
    ("apex_m", pa.float64()),  # where this lap's speed is lowest in the corner
    ("entry_speed_mps", pa.float64()),
    ("apex_speed_mps", pa.float64()),
    ("exit_speed_mps", pa.float64()),
    ("time_delta_s", pa.float64()),  # gained (<0) or lost (>0) against the reference lap
])  # fmt: skip
