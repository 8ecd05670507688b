"""Cached synthetic sessions and a runner for the analysis chain, shared by these tests.

Sessions are short (a few laps, ~5 minutes at 100 Hz IMU) and built once per test run.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from stages.batch import (
    build_indexes,
    compute_metrics,
    detect_laps,
    detect_segments,
    fuse_gnss_imu,
    fuse_quality_summary,
)
from stages.batch.contract import StageInput, StageOutput
from stages.batch.geo import ts_micros
from stages.batch.synth import SyntheticSession, synthesize

CHAIN = (
    ("fuse_gnss_imu", fuse_gnss_imu.run),
    ("fuse_quality_summary", fuse_quality_summary.run),
    ("detect_laps", detect_laps.run),
    ("detect_segments", detect_segments.run),
    ("compute_metrics", compute_metrics.run),
    ("build_indexes", build_indexes.run),
)


@lru_cache(maxsize=32)
def _session(key: tuple[tuple[str, Any], ...]) -> SyntheticSession:
    return synthesize(**dict(key))


def session(**kwargs: Any) -> SyntheticSession:
    """``synthesize(**kwargs)``, built once per distinct arguments."""
    return _session(tuple(sorted(kwargs.items())))


@lru_cache(maxsize=32)
def _fused(key: tuple[tuple[str, Any], ...]) -> StageOutput:
    s = _session(key)
    return fuse_gnss_imu.run(StageInput(datasets={"gnss": s.gnss, "imu": s.imu}))


def fused(**kwargs: Any) -> StageOutput:
    """The ``fuse_gnss_imu`` output for ``session(**kwargs)`` (cached)."""
    return _fused(tuple(sorted(kwargs.items())))


def run_chain(datasets: Mapping[str, pa.Table], config: Mapping[str, Any] | None = None,
              ) -> tuple[dict[str, pa.Table], dict[str, Mapping[str, Any]]]:
    """Run every analysis stage in DAG order, feeding outputs forward like the engine does."""
    ds: dict[str, pa.Table] = dict(datasets)
    sums: dict[str, Mapping[str, Any]] = {}
    for name, fn in CHAIN:
        out = fn(StageInput(datasets=ds, summaries=sums, config=config or {}))
        ds.update(out.datasets)
        sums[name] = out.summary
    return ds, sums


def seconds(s: SyntheticSession, table: pa.Table, column: str = "ts") -> np.ndarray:
    """A timestamp column as seconds since the synthetic session's start."""
    return (ts_micros(table, column) - int(s.truth.start.timestamp() * 1_000_000)) / 1e6


def position_rms(s: SyntheticSession, table: pa.Table) -> float:
    """2-D RMS error (m) of a table's lat/lon against the true path at its timestamps."""
    e, n = s.truth.frame.to_en(table.column("lat_deg").to_numpy(),
                               table.column("lon_deg").to_numpy())
    t = seconds(s, table)
    te = np.interp(t, s.truth.imu_t, s.truth.imu_e)
    tn = np.interp(t, s.truth.imu_t, s.truth.imu_n)
    return float(np.sqrt(np.mean((e - te) ** 2 + (n - tn) ** 2)))
