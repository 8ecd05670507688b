"""Issue 32 items 1-4 against ground truth: sectors and theoretical best, timing uncertainty,
the delta channel, corners; and point-to-point stages (item 5's separate finish line).

Synthetic sessions (10 Hz GNSS with 2 m of white and 0.3 m of slow noise, 100 Hz IMU) run
through the analysis stages as the engine would run them (``run_chain``).
"""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import detect_laps, track_library
from stages.batch.contract import SessionStageError, StageInput
from stages.batch.synth import SyntheticSession, synthesize
from tests.unit.stages.batch.sessions import run_chain, seconds, session


@lru_cache(maxsize=16)
def _chain(seed: int, fused: bool, laps: int = 8) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    s = session(laps=laps, seed=seed)
    ds = {"gnss": s.gnss, "imu": s.imu} if fused else {"gnss": s.gnss}
    return run_chain(ds, {"start_finish": s.truth.start_finish})


def _true_marks(s: SyntheticSession, lines: list[dict[str, float]]) -> list[list[float]]:
    """Per true lap, the true times of its start, each sector line and its end."""
    crossings = [s.truth.crossing_times(line) for line in lines]
    out = []
    for lap in s.truth.laps:
        inside = [c[(c > lap.start_s) & (c < lap.end_s)] for c in crossings]
        assert all(x.size == 1 for x in inside)
        out.append([lap.start_s, *(float(x[0]) for x in inside), lap.end_s])
    return out


def _sector_errors(seed: int, fused: bool) -> tuple[np.ndarray, float, float]:
    """Measured minus true sector times, and the measured and true theoretical best."""
    s = session(laps=8, seed=seed)
    ds, sums = _chain(seed, fused)
    lines = sums["detect_laps"]["sector_lines"]
    assert len(lines) == 2 and sums["detect_laps"]["sector_count"] == 3
    marks = _true_marks(s, lines)
    rows = [r for r in ds["sector_metrics"].to_pylist() if r["kind"] == "sector"]
    assert len(rows) == 3 * len(s.truth.laps)
    errors = np.array([r["time_s"] - (marks[r["lap"] - 1][r["sector"]]
                                      - marks[r["lap"] - 1][r["sector"] - 1]) for r in rows])
    valid = {r["lap"] for r in ds["lap_metrics"].to_pylist() if r["valid"]}
    true_best = sum(min(marks[k - 1][j] - marks[k - 1][j - 1] for k in valid)
                    for j in (1, 2, 3))
    return errors, sums["compute_metrics"]["theoretical_best_s"], true_best


def test_sector_times_and_theoretical_best_match_the_truth_within_the_lap_tolerance() -> None:
    errors, bests = [], []
    for seed in (0, 1, 2):
        err, best, true_best = _sector_errors(seed, fused=True)
        errors.append(err)
        bests.append(best - true_best)
    err = np.abs(np.concatenate(errors))
    # The lap tolerance (issue 32 item 6): every time within 0.02 s, the mean within 0.01 s.
    assert err.max() <= 0.02
    assert err.mean() <= 0.01
    assert np.abs(bests).max() <= 0.02


def test_sector_times_on_gnss_alone() -> None:
    err = np.abs(np.concatenate([_sector_errors(seed, fused=False)[0] for seed in (0, 1, 2)]))
    # No IMU: each sector line's crossings carry the receiver's noise alone. Before the
    # aligned crossings were moved onto the per-pass fits' mean: worst 0.047 s.
    assert err.mean() <= 0.01
    assert err.max() <= 0.03


def test_sector_rows_carry_their_best_and_rolling_best_is_the_best_so_far() -> None:
    ds, sums = _chain(0, True)
    rows = ds["sector_metrics"].to_pylist()
    valid = {r["lap"] for r in ds["lap_metrics"].to_pylist() if r["valid"]}
    for kind, count in (("sector", 3), ("mini", 20)):
        mine = [r for r in rows if r["kind"] == kind]
        assert {r["sector"] for r in mine} == set(range(1, count + 1))
        for k in range(1, count + 1):
            sector = [r for r in mine if r["sector"] == k]
            best = min(r["time_s"] for r in sector if r["lap"] in valid)
            assert [r["is_best"] for r in sector] == [r["time_s"] == best for r in sector]
            assert all(r["delta_to_best_s"] == pytest.approx(r["time_s"] - best) for r in sector)
    mini_best = sum(min(r["time_s"] for r in rows if r["kind"] == "mini" and r["sector"] == k
                        and r["lap"] in valid) for k in range(1, 21))
    assert sums["compute_metrics"]["theoretical_best_mini_s"] == pytest.approx(mini_best)
    laps = ds["lap_metrics"].to_pylist()
    so_far = np.inf
    for lap in laps:
        if lap["valid"]:
            so_far = min(so_far, lap["lap_time_s"])
        assert lap["rolling_best_s"] == (so_far if np.isfinite(so_far) else None)


def test_timing_uncertainty_describes_the_errors_and_grows_with_fewer_fixes() -> None:
    z = []
    for seed in (0, 1, 2, 3):
        s = session(laps=8, seed=seed)
        out = detect_laps.run(StageInput(datasets={"gnss": s.gnss},
                                         config={"start_finish": s.truth.start_finish}))
        laps = out.datasets["laps"]
        true = np.array([lap.lap_time_s for lap in s.truth.laps])
        measured = laps.column("lap_time_s").to_numpy()
        sigma = laps.column("lap_time_sigma_s").to_numpy()
        assert (sigma > 0).all()
        z.append((measured - true) / sigma)
    rms = float(np.sqrt(np.mean(np.concatenate(z) ** 2)))
    # A calibrated figure has an RMS z of 1; measured 1.6 (the slow receiver error is only
    # partly seen). Off by a factor of ten either way would be no figure at all.
    assert 0.5 <= rms <= 2.5
    sigmas = {}
    for hz in (5.0, 20.0):
        s = session(laps=6, seed=4, gnss_hz=hz)
        out = detect_laps.run(StageInput(datasets={"gnss": s.gnss},
                                         config={"start_finish": s.truth.start_finish}))
        sigmas[hz] = float(np.median(out.datasets["laps"].column("lap_time_sigma_s")))
    assert sigmas[5.0] > 1.3 * sigmas[20.0]


def test_delta_ends_at_the_lap_time_difference_and_follows_the_truth_on_the_way() -> None:
    s = session(laps=8, seed=1)
    ds, sums = _chain(1, True)
    ref = sums["compute_metrics"]["reference_lap"]
    assert ref == sums["compute_metrics"]["best_lap"]
    times = {r["lap"]: r["lap_time_s"] for r in ds["lap_metrics"].to_pylist()}
    delta = ds["lap_delta"].to_pylist()
    by_lap: dict[int, list[dict[str, Any]]] = {}
    for r in delta:
        by_lap.setdefault(r["lap"], []).append(r)
    assert set(by_lap) == set(times)
    marks = _true_marks(s, sums["detect_laps"]["sector_lines"])
    sectors = [r for r in ds["sector_metrics"].to_pylist() if r["kind"] == "sector"]
    where = {r["sector"]: r["end_m"] for r in sectors if r["lap"] == ref}
    for lap, rows in by_lap.items():
        d = np.array([r["distance_m"] for r in rows])
        assert d[0] == 0.0 and np.all(np.diff(d) > 0) and all(r["reference_lap"] == ref
                                                               for r in rows)
        assert rows[-1]["delta_s"] == pytest.approx(times[lap] - times[ref], abs=1e-4)
        assert rows[0]["delta_s"] == pytest.approx(0.0, abs=1e-9)
        # Mid-lap, at the sector lines (placed by position): the true time difference there.
        for k in (1, 2):
            true = ((marks[lap - 1][k] - marks[lap - 1][0])
                    - (marks[ref - 1][k] - marks[ref - 1][0]))
            got = float(np.interp(where[k], d, [r["delta_s"] for r in rows]))
            assert got == pytest.approx(true, abs=0.05)


def test_corner_apex_speeds_match_the_truth() -> None:
    errors = []
    for seed in (0, 1):
        s = session(laps=8, seed=seed)
        ds, sums = _chain(seed, True)
        corners = ds["corner_metrics"].to_pylist()
        assert sums["compute_metrics"]["corner_count"] == len(
            {c.corner for c in s.truth.corners})
        delta = ds["lap_delta"].to_pylist()
        lap_start = {lap.lap: lap.start_s for lap in s.truth.laps}
        for c in s.truth.corners:
            if c.lap is None or c.lap not in lap_start:
                continue
            rows = [r for r in delta if r["lap"] == c.lap]
            # The true apex's place on the reference path, through the lap's own channel.
            at = float(np.interp(c.apex_s - lap_start[c.lap], [r["time_s"] for r in rows],
                                 [r["distance_m"] for r in rows]))
            match = [r for r in corners if r["lap"] == c.lap and r["start_m"] <= at <= r["end_m"]]
            assert len(match) == 1
            row = match[0]
            assert row["direction"] == c.direction
            assert row["braking_m"] <= row["apex_m"] <= row["end_m"]
            assert row["entry_speed_mps"] >= row["apex_speed_mps"] <= row["exit_speed_mps"]
            errors.append(row["apex_speed_mps"] - c.min_speed_mps)
    err = np.abs(errors)
    assert err.max() <= 0.5  # m/s, at apex speeds of 15-40 m/s
    assert np.median(err) <= 0.15


def test_corner_time_lost_adds_up_to_the_lap_delta() -> None:
    ds, sums = _chain(0, True)
    ref = sums["compute_metrics"]["reference_lap"]
    corners = ds["corner_metrics"].to_pylist()
    assert all(r["time_delta_s"] == pytest.approx(0.0, abs=1e-9)
               for r in corners if r["lap"] == ref)
    delta = ds["lap_delta"].to_pylist()
    for lap in {r["lap"] for r in corners} - {ref}:
        rows = [r for r in delta if r["lap"] == lap]
        d, x = [r["distance_m"] for r in rows], [r["delta_s"] for r in rows]
        mine = [r for r in corners if r["lap"] == lap]
        ref_rows = {r["corner"]: r for r in corners if r["lap"] == ref}
        for r in mine:
            change = np.interp(r["end_m"], d, x) - np.interp(ref_rows[r["corner"]]["braking_m"],
                                                             d, x)
            assert r["time_delta_s"] == pytest.approx(change, abs=0.02)


def test_a_chosen_reference_lap() -> None:
    s = session(laps=8, seed=0)
    ds, sums = run_chain({"gnss": s.gnss}, {"start_finish": s.truth.start_finish,
                                            "laps": {"reference_lap": 5}})
    assert sums["compute_metrics"]["reference_lap"] == 5
    rows = [r for r in ds["lap_delta"].to_pylist() if r["lap"] == 5]
    assert all(r["delta_s"] == 0.0 for r in rows)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_point_to_point_stage_is_timed_from_its_start_to_its_finish_line(seed: int) -> None:
    s = session(laps=3, seed=seed, closed=False)
    for at_start, before_end in ((20.0, 30.0), (60.0, 60.0)):
        start = s.truth.line_across(at_start)
        finish = s.truth.line_across(s.truth.duration_s - before_end)
        out = detect_laps.run(StageInput(datasets={"gnss": s.gnss},
                                         config={"start_finish": start, "finish": finish}))
        laps = out.datasets["laps"].to_pylist()
        assert len(laps) == 1 and out.summary["finish"]["source"] == "config"
        true = s.truth.crossing_times(finish)[0] - s.truth.crossing_times(start)[0]
        # One pass of each line: nothing to align with, so the slow receiver error stays
        # (measured: up to 0.057 s where the start is crossed at 16 m/s) - and says so.
        err, sigma = abs(laps[0]["lap_time_s"] - true), laps[0]["lap_time_sigma_s"]
        assert err <= 3.0 * sigma and err <= 0.1
    # A start line alone on an open road: crossed once, no lap.
    alone = detect_laps.run(StageInput(datasets={"gnss": s.gnss}, config={"start_finish": start}))
    assert alone.summary["reason"] == "NO_LINE_CROSSINGS"


def test_configured_sector_lines_are_used() -> None:
    s = session(laps=6, seed=3)
    a, b = s.truth.laps[1], s.truth.laps[1]
    lines = [s.truth.line_across(a.start_s + 0.25 * a.lap_time_s),
             s.truth.line_across(b.start_s + 0.6 * b.lap_time_s)]
    out = detect_laps.run(StageInput(datasets={"gnss": s.gnss}, config={
        "start_finish": s.truth.start_finish, "sectors": lines}))
    assert [x["source"] for x in out.summary["sector_lines"]] == ["config", "config"]
    rows = out.datasets["sector_times"].to_pylist()
    marks = _true_marks(s, lines)
    for r in rows:
        true = marks[r["lap"] - 1][r["sector"]] - marks[r["lap"] - 1][r["sector"] - 1]
        assert r["time_s"] == pytest.approx(true, abs=0.04)
    seconds(s, out.datasets["sector_times"], "start_ts")  # timestamps on the session's clock


def test_a_session_on_a_library_track_is_timed_on_its_lines() -> None:
    """Issue 32 item 5: detected from the session's location, the library's start/finish and
    sector lines time the laps and sectors."""
    silverstone = track_library.by_name("Silverstone")
    assert silverstone is not None and silverstone.source == "library"
    s = synthesize(laps=4, seed=1, centreline=silverstone.centreline)
    ds, sums = run_chain({"gnss": s.gnss, "imu": s.imu})
    laps = sums["detect_laps"]
    assert laps["track"]["name"] == silverstone.name and laps["track"]["source"] == "library"
    assert laps["line"]["source"] == "track"
    start = silverstone.start_finish.model_dump()
    assert all(laps["line"][k] == pytest.approx(start[k], abs=1e-9) for k in start)
    lines = [x.model_dump() for x in silverstone.sectors]
    assert [x["source"] for x in laps["sector_lines"]] == ["track"] * len(lines)
    true = s.truth.crossing_times(start)
    measured = ds["laps"].column("lap_time_s").to_numpy()
    assert measured.size == true.size - 1
    # The worst crossing is the first, 15 s after the session's standing start (0.017 s early
    # in this session: the first lap reads 0.024 s long); the rest are within 0.01 s.
    err = np.abs(measured - np.diff(true))
    assert err.max() <= 0.03 and err.mean() <= 0.015
    marks = []
    crossings = [s.truth.crossing_times(x) for x in lines]
    for a, b in pairwise(true.tolist()):
        marks.append([a, *(float(c[(c > a) & (c < b)][0]) for c in crossings), b])
    for r in ds["sector_times"].to_pylist():
        want = marks[r["lap"] - 1][r["sector"]] - marks[r["lap"] - 1][r["sector"] - 1]
        assert r["time_s"] == pytest.approx(want, abs=0.03)
    # Named instead of detected, and refused by a name no track has.
    named = detect_laps.run(StageInput(datasets={"gnss": s.gnss}, config={"track": "gb-1948"}))
    assert named.summary["track"]["name"] == silverstone.name
    with pytest.raises(SessionStageError) as err:
        detect_laps.run(StageInput(datasets={"gnss": s.gnss}, config={"track": "Nowhere"}))
    assert err.value.code == "UNKNOWN_TRACK"
    # "none": the library is not consulted, the line is found from the track.
    found = detect_laps.run(StageInput(datasets={"gnss": s.gnss}, config={"track": "none"}))
    assert found.summary["line"]["source"] == "auto" and found.summary["track"] is None
