"""Golden results: what the pipeline makes of every real-device file, committed for review.

For each file in ``shared/data/nmea`` and ``shared/data/fit`` there is one record in
``tests/golden/<kind>.json`` (keyed by file name): the run's status (or the refusal code), the
samples per stream, time range and duration, distance, top speed, laps with one row per lap,
segment counts, the features and the reasons they are off, and every job's final state. The checker
(``tests/integration/sessions/test_golden_real_files.py``) runs every file through the real job
DAG and compares; a difference fails the check, naming the file and each field that moved.

When a change to a result is intended, regenerate the files and review their diff::

    .venv/bin/python -m tests.golden update

Floats are rounded (distances to 0.1 m, speeds to 0.01 m/s, times to 0.001 s) so that float
noise below what anyone would call a change does not churn the files; keys are sorted.

This module is the pure half (building the record, writing it, diffing it); the run itself is the
checker's, with the same fixtures as the other DAG tests.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from stages.batch.geo import LocalFrame, Motion, path_distance

GOLDEN_DIR: Final = Path(__file__).resolve().parent
KINDS: Final = {"fit": "*.fit", "nmea": "*.log"}  # the real-file folders and their data files
# NMEA logs with no RMC/ZDA date are refused without an upload date (NO_SESSION_DATE); every
# NMEA file is uploaded with this one. A log that dates itself ignores it (stages/batch/formats
# /nmea.py), so it only ever dates the dateless ones.
NMEA_SESSION_DATE: Final = dt.date(2000, 1, 1)
UPDATE_ENV: Final = "TIDEWAY_UPDATE_GOLDEN"
UPDATE_COMMAND: Final = ".venv/bin/python -m tests.golden update"

# Rounding per unit, in decimal places.
_METRES: Final = 1
_MPS: Final = 2
_SECONDS: Final = 3


def golden_path(kind: str) -> Path:
    """The golden records of every real file of ``kind``, one JSON object keyed by file name
    (one file per kind, so that no committed path repeats a third-party file's name)."""
    return GOLDEN_DIR / f"{kind}.json"


def _round(value: Any, places: int) -> float | None:
    if value is None:
        return None
    x = float(value)
    if not np.isfinite(x):
        return None
    return round(x, places) + 0.0  # + 0.0: no "-0.0" in the files


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if start is None or end is None:
        return None
    delta = dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)
    return _round(delta.total_seconds(), _SECONDS)


def track_distance_m(datasets: Mapping[str, pa.Table]) -> float | None:
    """Length of the session's track as the analysis stages see it.

    The pipeline has no session-distance output of its own, so this measures the series the
    stages themselves work on (:class:`~stages.batch.geo.Motion`: ``fused`` when fusion ran,
    else the valid GNSS fixes ``time_align`` left), with the stages' own plane and polyline
    length - the same numbers a lap's distance is made of.
    """
    motion = Motion.from_datasets(datasets)
    if motion is None:
        return None
    east, north = LocalFrame.around(motion.lat, motion.lon).to_en(motion.lat, motion.lon)
    return _round(path_distance(east, north)[-1], _METRES)


def lap_rows(lap_metrics: pa.Table | None) -> list[dict[str, Any]]:
    """One row per lap from ``compute_metrics``' ``lap_metrics`` dataset."""
    if lap_metrics is None:
        return []
    return [
        {
            "lap": r["lap"],
            "lap_time_s": _round(r["lap_time_s"], _SECONDS),
            "distance_m": _round(r["distance_m"], _METRES),
            "max_speed_mps": _round(r["max_speed_mps"], _MPS),
            "valid": r["valid"],
            "pit": r["pit"],
            "is_best": r["is_best"],
        }
        for r in lap_metrics.sort_by("lap").to_pylist()
    ]


def record(
    *,
    kind: str,
    name: str,
    session_date: dt.date | None,
    status: str,
    jobs: Mapping[str, str],
    refusal: Mapping[str, str] | None,
    summary: Mapping[str, Any],
    features_available: Mapping[str, bool],
    feature_reasons: Mapping[str, str],
    datasets: Mapping[str, pa.Table],
    dataset_rows: Mapping[str, int],
) -> dict[str, Any]:
    """The golden record of one run, from its final progress and its derived datasets.

    ``summary`` is the run summary ``publish_session`` wrote (empty when the run stopped
    before it), ``datasets`` the analysis inputs by the stages' plain names (``gnss``,
    ``fused``, ``lap_metrics``), ``dataset_rows`` every derived dataset's row count.
    """
    time_range = summary.get("time_range") or {}
    laps = summary.get("laps") or {}
    start, end = time_range.get("start"), time_range.get("end")
    return {
        "file": f"{kind}/{name}",
        "session_date": session_date.isoformat() if session_date else None,
        "status": status,
        "refusal": dict(refusal) if refusal else None,
        "format": summary.get("format"),
        "samples": dict(summary.get("streams") or {}),
        "start": start,
        "end": end,
        "duration_s": _seconds_between(start, end),
        "distance_m": track_distance_m(datasets),
        "max_speed_mps": _round(laps.get("max_speed_mps"), _MPS),
        "laps": {
            "count": laps.get("count"),
            "best_lap": laps.get("best_lap"),
            "best_lap_time_s": _round(laps.get("best_lap_time_s"), _SECONDS),
            "mean_lap_time_s": _round(laps.get("mean_lap_time_s"), _SECONDS),
            "rows": lap_rows(datasets.get("lap_metrics")),
        },
        "segments": dict(summary.get("segments") or {}),
        "features": {
            f: {"available": features_available[f], "reason": feature_reasons.get(f)}
            for f in features_available
        },
        "jobs": dict(jobs),
        "datasets": dict(dataset_rows),
    }


def dumps(rec: Mapping[str, Any]) -> str:
    """The committed text of a record: sorted keys, two-space indent, final newline."""
    return json.dumps(rec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        if not value:
            yield prefix, {}
        for k in sorted(value):
            yield from _flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        if not value:
            yield prefix, []
        for i, v in enumerate(value):
            yield from _flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, value


_ABSENT: Final = object()


def differences(golden: Any, fresh: Any) -> list[str]:
    """One line per field that differs: ``field: golden <old> -> now <new>``."""
    old, new = dict(_flatten(golden)), dict(_flatten(fresh))
    lines = []
    for field in sorted(old.keys() | new.keys()):
        a, b = old.get(field, _ABSENT), new.get(field, _ABSENT)
        if a != b or type(a) is not type(b):
            shown_a = "(absent)" if a is _ABSENT else json.dumps(a)
            shown_b = "(absent)" if b is _ABSENT else json.dumps(b)
            lines.append(f"{field}: golden {shown_a} -> now {shown_b}")
    return lines
