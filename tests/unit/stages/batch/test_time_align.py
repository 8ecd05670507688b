"""time_align: monotonic streams, clock statistics and one timeline."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import canonical, normalise_units, parse_raw, time_align
from stages.batch.contract import SessionStageError, StageInput
from tests.unit.stages.batch import sample_streams as streams
from tests.unit.stages.batch.formats.nmea_data import log
from tests.unit.stages.batch.sample_streams import blob


def _imu_at(offsets_us: np.ndarray) -> pa.Table:
    base = streams.imu(len(offsets_us))
    return base.set_column(0, base.schema.field(0), streams.ts(offsets_us))


def test_monotonic_mask_counts_duplicates_and_steps_back() -> None:
    keep, dup, back, max_back = time_align.monotonic_mask(
        np.array([0, 1_000_000, 1_000_000, 3_000_000, 2_000_000, 4_000_000], dtype=np.int64)
    )
    assert keep.tolist() == [True, True, False, True, False, True]
    assert (dup, back, max_back) == (1, 1, 1.0)


def test_first_occurrence_wins_and_counts_reach_the_summary() -> None:
    imu = _imu_at(np.array([0, 10_000, 10_000, 30_000, 20_000, 40_000]))
    out = time_align.run(StageInput(datasets={"imu": imu}))
    kept = out.datasets["imu"]
    assert kept.column("ax_mps2").to_pylist() == [
        imu.column("ax_mps2")[i].as_py() for i in (0, 1, 3, 5)
    ]
    stats = out.summary["streams"]["imu"]
    assert (stats["rows_in"], stats["rows_out"]) == (6, 4)
    assert (stats["duplicates"], stats["backwards"]) == (1, 1)
    assert out.summary["duplicates_removed"] == 1
    assert out.summary["backwards_removed"] == 1


def test_aux_channels_are_cleaned_independently() -> None:
    ts = streams.ts(np.array([0, 0, 1_000_000, 1_000_000, 1_000_000]))
    aux = pa.table(
        {"ts": ts, "channel": ["hr", "cad", "hr", "cad", "hr"], "value": [1.0, 2, 3, 4, 5]}
    )
    out = time_align.run(StageInput(datasets={"aux": aux}))
    assert out.datasets["aux"].column("value").to_pylist() == [1.0, 2.0, 3.0, 4.0]
    assert out.summary["streams"]["aux"]["duplicates"] == 1


def test_drift_survives_drops_and_gaps() -> None:
    k = np.arange(30_000, dtype=np.float64)
    k = np.delete(k, [100, 5000, 5001])  # one dropped sample, then two in a row
    k[20_000:] += 600  # a 6 s gap
    ts = np.round(k * 10_000.5).astype(np.int64)  # 100 Hz nominal, clock 50 ppm slow
    out = time_align.run(StageInput(datasets={"imu": _imu_at(ts)}))
    stats = out.summary["streams"]["imu"]
    assert stats["nominal_hz"] == 100.0
    assert stats["drift_ppm"] == pytest.approx(50.0, abs=0.5)
    assert stats["gap_count"] == 2  # a 3-period step is a gap (> 2.5 periods); so is 6 s
    assert stats["max_gap_s"] == pytest.approx(6.01, abs=0.01)
    assert stats["jitter_rms_ms"] < 0.001  # only the microsecond rounding


def test_jitter_is_measured() -> None:
    rng = np.random.default_rng(3)
    ts = np.arange(20_000) * 10_000 + rng.integers(-200, 201, size=20_000)
    out = time_align.run(StageInput(datasets={"imu": _imu_at(ts)}))
    stats = out.summary["streams"]["imu"]
    assert stats["jitter_rms_ms"] == pytest.approx(0.2 / np.sqrt(3), rel=0.05)
    assert stats["jitter_max_ms"] == pytest.approx(0.2, abs=0.01)
    assert abs(stats["drift_ppm"]) < 5


def test_one_timeline_and_offsets() -> None:
    gnss = streams.gnss(50)  # 0 .. 4.9 s
    imu = _imu_at(np.arange(1000) * 10_000 + 1_000_000)  # 1.0 .. 10.99 s
    out = time_align.run(
        StageInput(datasets={"gnss": gnss, "imu": imu}, config={"time_offsets_s": {"imu": -0.5}})
    )
    s = out.summary
    assert s["t0_us"] == streams.T0_US
    assert s["streams"]["imu"]["start_offset_s"] == pytest.approx(0.5)
    assert s["streams"]["gnss"]["end_offset_s"] == pytest.approx(4.9)
    assert s["common_start_us"] == streams.T0_US + 500_000
    assert s["common_end_us"] == streams.T0_US + 4_900_000
    assert s["duration_s"] == pytest.approx(10.49)
    assert s["relative_drift_ppm"] == pytest.approx(0.0, abs=1.0)


@pytest.mark.parametrize("bad", [{"imu": "soon"}, {"radar": 1.0}, [1, 2]])
def test_bad_offsets_config(bad: object) -> None:
    with pytest.raises(SessionStageError) as err:
        time_align.run(StageInput(config={"time_offsets_s": bad}))
    assert err.value.code == "INVALID_CONFIG"


def test_missing_speed_and_course_are_derived_from_positions() -> None:
    gnss = streams.gnss(30, hz=10.0, speed=np.full(30, 25.0))
    no_motion = gnss.drop_columns(["speed_mps", "course_deg"])
    out = time_align.run(StageInput(datasets={"gnss": canonical.conform("gnss", no_motion)}))
    g = out.datasets["gnss"]
    assert np.allclose(g.column("speed_mps").to_numpy(), 25.0, rtol=1e-3)
    assert np.allclose(g.column("course_deg").to_numpy(), 90.0, atol=0.1)
    assert out.summary["gnss_speed_source"] == "derived"
    assert out.summary["gnss_speed_filled"] == 30


def test_real_log_step_back_is_removed() -> None:
    parsed = parse_raw.run(StageInput(artifacts=(blob("t.log", log("telit-he910.log")),)))
    norm = normalise_units.run(
        StageInput(datasets=parsed.datasets, summaries={"parse_raw": parsed.summary})
    )
    out = time_align.run(StageInput(datasets=norm.datasets))
    stats = out.summary["streams"]["gnss"]
    assert (stats["rows_in"], stats["rows_out"], stats["backwards"]) == (187, 186, 1)
    assert stats["max_backwards_s"] == pytest.approx(0.302)
    ts = out.datasets["gnss"].column("ts").cast(pa.int64()).to_numpy()
    assert (np.diff(ts) > 0).all()
    assert out.summary["gnss_speed_source"] == "receiver"


def test_a_lost_speed_is_the_receivers_interpolated_not_two_fixes_differenced() -> None:
    """Positions 2 m noisy at 10 Hz: differencing neighbours 0.2 s apart reads ±10 m/s."""
    n = 200
    speed = np.linspace(20.0, 30.0, n)
    gnss = streams.gnss(n, hz=10.0, speed=speed)
    rng = np.random.default_rng(3)
    lat = gnss.column("lat_deg").to_numpy() + rng.normal(0, 2.0 / 111_000, n)
    lost = np.zeros(n, dtype=bool)
    lost[10:190:7] = True  # single lost epochs
    lost[100:130] = True  # and a 3 s stretch without receiver speed
    course = np.where(np.arange(n) % 2 == 0, 359.0, 1.0)  # straddling north
    table = gnss.set_column(1, "lat_deg", pa.array(lat))
    table = table.set_column(4, "speed_mps", pa.array(np.where(lost, np.nan, speed),
                                                      from_pandas=True))  # fmt: skip
    table = table.set_column(5, "course_deg", pa.array(np.where(lost, np.nan, course),
                                                       from_pandas=True))  # fmt: skip
    out = time_align.run(StageInput(datasets={"gnss": canonical.conform("gnss", table)}))
    g = out.datasets["gnss"]
    filled = g.column("speed_mps").to_numpy()
    single = lost.copy()
    single[100:130] = False
    assert np.abs(filled[single] - speed[single]).max() < 1e-9  # the receiver's, interpolated
    # The long stretch: a velocity fitted to ±1 s of noisy fixes, not a neighbour difference.
    assert np.abs(filled[100:130] - speed[100:130]).max() < 2.5
    filled_course = g.column("course_deg").to_numpy()[single]
    assert np.all(np.minimum(filled_course, 360.0 - filled_course) <= 1.0 + 1e-9)
    assert out.summary["gnss_speed_interpolated"] == int(single.sum())
    assert out.summary["gnss_speed_filled"] == int(lost.sum())
    assert out.summary["gnss_speed_source"] == "mixed"
