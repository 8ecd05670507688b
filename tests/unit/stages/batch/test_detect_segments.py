"""detect_segments against synthetic truth: ≥ 95 % of corners, ≥ 90 % of jumps, none on flat."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stages.batch import detect_laps, detect_segments
from stages.batch.contract import StageInput
from stages.batch.synth import SyntheticSession, synthesize
from tests.unit.stages.batch.sessions import fused, seconds, session


def _segments(s: SyntheticSession, datasets: dict[str, pa.Table]) -> tuple[pa.Table, Any]:
    out = detect_segments.run(StageInput(datasets=datasets))
    return out.datasets["segments"], out.summary


def _corner_recall(s: SyntheticSession, seg: pa.Table) -> tuple[float, int]:
    """Share of true corner passes with a detected corner of the same direction whose apex
    lies inside the true corner; and how many detected corners match no true one."""
    kind = seg.column("kind").to_pylist()
    apex = seconds(s, seg.filter(pc.equal(seg.column("kind"), "corner")), "apex_ts")
    dirs = [d for k, d in zip(kind, seg.column("direction").to_pylist(), strict=True)
            if k == "corner"]

    def hit(c: Any, a: float, d: str) -> bool:
        return bool(c.start_s <= a <= c.end_s and d == c.direction)

    found = sum(any(hit(c, a, d) for a, d in zip(apex, dirs, strict=True))
                for c in s.truth.corners)
    spurious = sum(not any(hit(c, a, d) for c in s.truth.corners)
                   for a, d in zip(apex, dirs, strict=True))
    return found / len(s.truth.corners), spurious


def _jump_recall(s: SyntheticSession, seg: pa.Table) -> tuple[float, int]:
    jumps = seg.filter(pc.equal(seg.column("kind"), "jump"))
    a, b = seconds(s, jumps, "start_ts"), seconds(s, jumps, "end_ts")

    def hit(j: Any, x: float, y: float) -> bool:
        return bool(x <= j.landing_s and y >= j.takeoff_s)

    found = sum(any(hit(j, x, y) for x, y in zip(a, b, strict=True)) for j in s.truth.jumps)
    spurious = sum(not any(hit(j, x, y) for j in s.truth.jumps) for x, y in zip(a, b, strict=True))
    return (found / len(s.truth.jumps) if s.truth.jumps else 1.0), spurious


@pytest.mark.parametrize(("seed", "laps", "extra"), [
    (0, 2, {}), (1, 3, {"pit_lap": 2}), (3, 2, {}), (5, 3, {}), (6, 2, {"closed": False}),
])
def test_corners_and_jumps_from_fused_series(seed: int, laps: int, extra: dict[str, Any]) -> None:
    s = session(laps=laps, seed=seed, **extra)
    ds = {"gnss": s.gnss, "imu": s.imu, **fused(laps=laps, seed=seed, **extra).datasets}
    seg, summary = _segments(s, ds)
    assert summary["corner_source"] == "fused" and summary["jumps_available"] is True
    recall, spurious = _corner_recall(s, seg)
    assert recall >= 0.95 and spurious == 0
    jump_recall, false_jumps = _jump_recall(s, seg)
    assert jump_recall >= 0.90 and false_jumps == 0
    jumps = seg.filter(pc.equal(seg.column("kind"), "jump"))
    truth_air = sorted(j.airtime_s for j in s.truth.jumps)
    assert np.allclose(sorted(jumps.column("airtime_s").to_pylist()), truth_air, atol=0.1)


@pytest.mark.parametrize("source", ["imu", "gnss"])
def test_corners_without_fusion(source: str) -> None:
    s = session(laps=2, seed=3)
    ds = {"gnss": s.gnss, "imu": s.imu} if source == "imu" else {"gnss": s.gnss}
    seg, summary = _segments(s, ds)
    assert summary["corner_source"] == source
    recall, spurious = _corner_recall(s, seg)
    assert recall >= 0.95 and spurious == 0
    if source == "gnss":
        assert summary["jumps_available"] is False and summary["jumps_reason"] == "NO_IMU_STREAM"
        assert summary["jump_count"] == 0


@pytest.mark.parametrize("seed", [2, 4, 7])
def test_no_jump_on_a_flat_track_even_with_a_noisy_imu(seed: int) -> None:
    s = synthesize(laps=2, seed=seed, flat=True, imu_accel_noise=0.6)
    seg, summary = _segments(s, {"gnss": s.gnss, "imu": s.imu})
    assert summary["jump_count"] == 0 and "jump" not in seg.column("kind").to_pylist()
    recall, _ = _corner_recall(s, seg)
    assert recall >= 0.95


def test_segments_are_labelled_with_laps_and_tile_the_session() -> None:
    s = session(laps=3, seed=1, pit_lap=2)
    ds = {"gnss": s.gnss, "imu": s.imu, **fused(laps=3, seed=1, pit_lap=2).datasets}
    ds |= detect_laps.run(StageInput(datasets=ds, config={
        "start_finish": s.truth.start_finish})).datasets
    seg, _ = _segments(s, ds)
    corners = seg.filter(pc.equal(seg.column("kind"), "corner"))
    truth_laps = [c.lap for c in s.truth.corners]
    assert corners.column("lap").to_pylist() == truth_laps
    assert seg.column("segment_id").to_pylist() == list(range(1, seg.num_rows + 1))
    # Corners and straights alternate without overlapping; every corner has its apex inside.
    track = seg.filter(pc.not_equal(seg.column("kind"), "jump"))
    start, end = seconds(s, track, "start_ts"), seconds(s, track, "end_ts")
    assert np.all(start[1:] >= end[:-1] - 1e-6)
    a = seconds(s, corners, "apex_ts")
    assert np.all((seconds(s, corners, "start_ts") <= a) & (a <= seconds(s, corners, "end_ts")))
    turn = np.array(corners.column("heading_change_deg").to_pylist())
    signs = np.where(np.array(corners.column("direction").to_pylist()) == "left", 1, -1)
    assert np.all(np.sign(turn) == signs)
