"""compute_metrics and build_indexes over the whole analysis chain."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.batch import build_indexes, compute_metrics
from stages.batch.contract import StageInput
from stages.batch.geo import ts_micros
from tests.unit.stages.batch.sessions import run_chain, seconds, session


def test_lap_metrics_best_lap_and_deltas() -> None:
    s = session(laps=4, seed=1, pit_lap=2)
    ds, sums = run_chain({"gnss": s.gnss, "imu": s.imu}, {"start_finish": s.truth.start_finish})
    lm = ds["lap_metrics"]
    truth = [lap.lap_time_s for lap in s.truth.laps]
    valid = lm.column("valid").to_pylist()
    assert valid == [True, False, False, True]
    best = min(t for t, v in zip(truth, valid, strict=True) if v)
    best_lap = 1 + truth.index(best)
    m = sums["compute_metrics"]
    assert m["best_lap"] == best_lap and abs(m["best_lap_time_s"] - best) <= 0.05
    assert m["valid_lap_count"] == 2 and m["lap_compare_available"] is True
    assert lm.column("is_best").to_pylist() == [i + 1 == best_lap for i in range(4)]
    delta = np.array(lm.column("delta_to_best_s").to_pylist())
    assert np.allclose(delta, np.array(truth) - best, atol=0.1)
    assert delta[best_lap - 1] == 0.0
    # Per-lap speeds against the true path: mean speed = lap length / lap time.
    tt = s.truth.imu_t
    true_speed = np.hypot(np.gradient(s.truth.imu_e, tt), np.gradient(s.truth.imu_n, tt))
    for i, lap in enumerate(s.truth.laps):
        inside = (tt >= lap.start_s) & (tt <= lap.end_s)
        assert abs(lm.column("max_speed_mps")[i].as_py() - true_speed[inside].max()) < 0.3
        true_len = float(np.sum(np.hypot(np.diff(s.truth.imu_e[inside]),
                                         np.diff(s.truth.imu_n[inside]))))
        assert abs(lm.column("avg_speed_mps")[i].as_py() - true_len / lap.lap_time_s) < 0.1
        assert abs(lm.column("distance_m")[i].as_py() - true_len) / true_len < 0.01


def test_segment_metrics_speeds_and_corner_deltas() -> None:
    s = session(laps=3, seed=5)
    ds, _ = run_chain({"gnss": s.gnss, "imu": s.imu}, {"start_finish": s.truth.start_finish})
    sm, seg = ds["segment_metrics"], ds["segments"]
    assert sm.num_rows == seg.num_rows
    assert sm.column("segment_id").to_pylist() == seg.column("segment_id").to_pylist()
    corners = sm.filter(pc.equal(sm.column("kind"), "corner"))
    mins = np.array(corners.column("min_speed_mps").to_pylist())
    avgs = np.array(corners.column("avg_speed_mps").to_pylist())
    maxs = np.array(corners.column("max_speed_mps").to_pylist())
    apex = np.array(corners.column("apex_speed_mps").to_pylist())
    assert np.all(mins <= avgs) and np.all(avgs <= maxs)
    assert np.all((apex >= mins - 1e-9) & (apex <= maxs + 1e-9))
    # Every lap has the same corners here, so each (kind, ordinal) has a best pass (delta 0).
    in_laps = corners.filter(pc.is_valid(corners.column("lap")))
    deltas = np.array(in_laps.column("delta_to_best_s").to_pylist())
    assert np.all(deltas >= 0)
    ordinals = in_laps.column("lap_ordinal").to_pylist()
    for o in set(ordinals):
        assert min(d for d, k in zip(deltas, ordinals, strict=True) if k == o) == 0.0


def test_indexes_slice_series_to_laps_and_segments() -> None:
    s = session(laps=3, seed=0)
    ds, sums = run_chain({"gnss": s.gnss, "imu": s.imu}, {"start_finish": s.truth.start_finish})
    li, si = ds["lap_index"], ds["segment_index"]
    assert li.num_rows == 3 and si.num_rows == ds["segments"].num_rows
    assert sums["build_indexes"]["series"] == ["fused", "gnss", "imu"]
    for name in ("gnss", "imu", "fused"):
        ts = ts_micros(ds[name])
        for row in li.to_pylist():
            a, b = row[f"{name}_row_start"], row[f"{name}_row_end"]
            lo = int(row["start_ts"].timestamp() * 1e6)
            hi = int(row["end_ts"].timestamp() * 1e6)
            assert np.all((ts[a:b] >= lo - 1) & (ts[a:b] <= hi + 1))
            assert (a == 0 or ts[a - 1] < lo) and (b == ts.size or ts[b] > hi - 1)
    dur = np.array(li.column("duration_s").to_pylist())
    assert np.allclose(dur, [lap.lap_time_s for lap in s.truth.laps], atol=0.05)
    assert np.allclose(seconds(s, si, "start_ts"), seconds(s, ds["segments"], "start_ts"))


def test_metrics_and_indexes_without_laps() -> None:
    s = session(laps=3, seed=4, closed=False)
    ds, sums = run_chain({"gnss": s.gnss, "imu": s.imu})
    assert sums["detect_laps"]["reason"] == "TRACK_NOT_CLOSED"
    assert ds["lap_metrics"].num_rows == 0 and ds["lap_index"].num_rows == 0
    assert sums["compute_metrics"]["best_lap"] is None
    assert sums["compute_metrics"]["max_speed_mps"] > 20
    # Segments still work on an open road: every segment has metrics, none has a lap.
    assert ds["segment_metrics"].num_rows == ds["segments"].num_rows > 10
    assert ds["segment_metrics"].column("lap").null_count == ds["segments"].num_rows
    empty = compute_metrics.run(StageInput())
    assert empty.datasets["lap_metrics"].num_rows == 0
    assert empty.datasets["segment_metrics"].num_rows == 0
    idx = build_indexes.run(StageInput())
    assert idx.summary["session_start"] is None and idx.datasets["lap_index"].num_rows == 0
    assert isinstance(idx.datasets["segment_index"], pa.Table)


def test_chain_without_imu_runs_on_gnss_alone() -> None:
    s = session(laps=3, seed=2)
    ds, sums = run_chain({"gnss": s.gnss}, {"start_finish": s.truth.start_finish})
    assert sums["fuse_gnss_imu"] == {"skipped": True, "reason": "NO_IMU_STREAM"}
    assert sums["fuse_quality_summary"]["skipped"] is True
    assert sums["detect_laps"]["source"] == "gnss" and sums["detect_laps"]["lap_count"] == 3
    assert sums["detect_segments"]["jumps_reason"] == "NO_IMU_STREAM"
    assert sums["detect_segments"]["corner_count"] == len(s.truth.corners)
    assert ds["lap_metrics"].num_rows == 3 and "fused" not in ds
