"""The lap, sector and delta CSV writers on hand-built tables of the datasets' own schemas."""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

import pyarrow as pa

from stages.batch.export.lap_csv import delta_csv, laps_csv, sectors_csv
from stages.batch.lap_datasets import (
    LAP_DELTA_SCHEMA,
    LAP_METRICS_SCHEMA,
    LAPS_SCHEMA,
    SECTOR_METRICS_SCHEMA,
)

T0 = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _rows(data: bytes) -> list[dict[str, str]]:
    assert data.count(b"\r\n") == data.count(b"\n")  # RFC 4180 line ends
    return list(csv.DictReader(io.StringIO(data.decode())))


def _laps() -> pa.Table:
    rows: list[dict[str, Any]] = [
        {"lap": 1, "start_ts": _at(10.0004), "end_ts": _at(72.3456), "lap_time_s": 62.3452,
         "distance_m": 1500.123, "pit_in": False, "pit_out": False, "pit": False,
         "stopped_s": 0.0, "valid": True, "lap_time_sigma_s": 0.0123},
        {"lap": 2, "start_ts": _at(72.3456), "end_ts": _at(140.0), "lap_time_s": 67.6544,
         "distance_m": 1510.0, "pit_in": True, "pit_out": False, "pit": True,
         "stopped_s": 4.5, "valid": False, "lap_time_sigma_s": None},
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=LAPS_SCHEMA)


def _metrics() -> pa.Table:
    rows: list[dict[str, Any]] = [
        {"lap": 1, "start_ts": _at(10.0004), "end_ts": _at(72.3456), "lap_time_s": 62.3452,
         "delta_to_best_s": 0.0, "is_best": True, "valid": True, "pit": False,
         "max_speed_mps": 41.23456, "avg_speed_mps": 24.061, "distance_m": 1500.123,
         "lap_time_sigma_s": 0.0123, "rolling_best_s": 62.3452},
        {"lap": 2, "start_ts": _at(72.3456), "end_ts": _at(140.0), "lap_time_s": 67.6544,
         "delta_to_best_s": 5.3092, "is_best": False, "valid": False, "pit": True,
         "max_speed_mps": 39.0, "avg_speed_mps": 22.3, "distance_m": 1510.0,
         "lap_time_sigma_s": None, "rolling_best_s": 62.3452},
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=LAP_METRICS_SCHEMA)


def test_laps_csv_has_one_row_per_lap_with_times_to_the_millisecond() -> None:
    rows = _rows(laps_csv(_laps(), _metrics()))
    assert [r["lap"] for r in rows] == ["1", "2"]
    first, second = rows
    assert first["start"] == "2026-05-01T12:00:10.000Z"
    assert first["end"] == "2026-05-01T12:01:12.346Z"
    assert first["lap_time_s"] == "62.345" and first["lap_time_sigma_s"] == "0.0123"
    assert first["delta_to_best_s"] == "0.000" and first["rolling_best_s"] == "62.345"
    assert (first["is_best"], first["valid"], first["pit"]) == ("true", "true", "false")
    assert first["distance_m"] == "1500.12" and first["max_speed_mps"] == "41.235"
    assert second["lap_time_sigma_s"] == ""  # unknown: an empty cell, never "None" or "nan"
    assert (second["pit_in"], second["pit_out"], second["valid"]) == ("true", "false", "false")
    assert second["stopped_s"] == "4.500" and second["delta_to_best_s"] == "5.309"


def test_laps_csv_without_metrics_or_newer_columns_leaves_their_cells_empty() -> None:
    old = _laps().drop_columns(["lap_time_sigma_s"])  # a run from before the column existed
    rows = _rows(laps_csv(old))
    assert len(rows) == 2
    assert rows[0]["lap_time_s"] == "62.345"
    assert rows[0]["max_speed_mps"] == rows[0]["lap_time_sigma_s"] == rows[0]["is_best"] == ""


def test_laps_csv_of_no_laps_is_the_header_alone() -> None:
    data = laps_csv(LAPS_SCHEMA.empty_table(), LAP_METRICS_SCHEMA.empty_table())
    assert data.decode().splitlines() == [data.decode().splitlines()[0]]
    assert data.startswith(b"lap,start,end,lap_time_s,")


def test_sectors_csv_lists_sectors_then_mini_sectors_per_lap() -> None:
    rows: list[dict[str, Any]] = []
    for lap in (2, 1):
        for kind, count in (("mini", 3), ("sector", 2)):
            for k in range(count, 0, -1):
                rows.append({"lap": lap, "kind": kind, "sector": k, "start_m": (k - 1) * 100.0,
                             "end_m": k * 100.0 + 0.004, "time_s": 10.0 + k / 3,
                             "sigma_s": None if k == 2 else 0.02,
                             "delta_to_best_s": 0.0 if lap == 1 else 0.25,
                             "is_best": lap == 1})  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=SECTOR_METRICS_SCHEMA)
    out = _rows(sectors_csv(table))
    assert list(out[0]) == ["lap", "kind", "sector", "start_m", "end_m", "time_s", "sigma_s",
                            "delta_to_best_s", "is_best"]  # fmt: skip
    assert [(r["lap"], r["kind"], r["sector"]) for r in out[:5]] == [
        ("1", "sector", "1"), ("1", "sector", "2"),
        ("1", "mini", "1"), ("1", "mini", "2"), ("1", "mini", "3")]  # fmt: skip
    assert len(out) == 10
    assert out[0]["time_s"] == "10.333" and out[0]["end_m"] == "100.00"
    assert out[1]["sigma_s"] == "" and out[0]["sigma_s"] == "0.0200"
    assert out[5]["delta_to_best_s"] == "0.250" and out[5]["is_best"] == "false"


def test_delta_csv_is_the_channel_over_distance_per_lap() -> None:
    rows = [{"lap": lap, "reference_lap": 1, "distance_m": d, "time_s": d / 30 * (1 + lap / 100),
             "delta_s": d / 30 * lap / 100, "speed_mps": 30.0}
            for lap in (2, 3) for d in (50.0, 0.0, 100.0)]  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=LAP_DELTA_SCHEMA)
    out = _rows(delta_csv(table))
    assert list(out[0]) == ["lap", "reference_lap", "distance_m", "time_s", "delta_s",
                            "speed_mps"]  # fmt: skip
    assert [(r["lap"], r["distance_m"]) for r in out] == [
        ("2", "0.00"), ("2", "50.00"), ("2", "100.00"),
        ("3", "0.00"), ("3", "50.00"), ("3", "100.00")]  # fmt: skip
    assert out[2]["delta_s"] == "0.067" and out[2]["time_s"] == "3.400"
    assert {r["reference_lap"] for r in out} == {"1"}
