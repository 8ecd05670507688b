"""The Arrow schemas of a session's two lap datasets, each declared once.

``laps`` (written by :mod:`stages.batch.detect_laps`): one row per complete lap with its
crossings, distance and pit/validity flags. ``lap_metrics`` (written by
:mod:`stages.batch.compute_metrics`): the same laps with their timing against the best valid
lap and their speeds. The writers build their tables from these schemas and the readers
(``streams/views/laps.py``) select their columns by them, so a column renamed or retyped here
is renamed for both sides at once.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = ["LAPS_SCHEMA", "LAP_METRICS_SCHEMA"]

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
])  # fmt: skip
