"""downsample L0/L1/L2: peaks survive, schemas stay canonical, sizes shrink."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.batch import canonical, downsample
from stages.batch.contract import SessionStageError, StageInput
from tests.unit.stages.batch import sample_streams as streams

LAP_S = 90.0
LAPS = 12
HZ = 10.0


def _lap_series() -> tuple[pa.Table, np.ndarray]:
    """GNSS at 10 Hz over 12 laps: smooth speed plus one single-sample spike per lap."""
    rng = np.random.default_rng(7)
    n = int(LAPS * LAP_S * HZ)
    t = np.arange(n) / HZ
    speed = 30 + 12 * np.sin(2 * np.pi * t / 17.0) + rng.normal(0, 0.3, n)
    spikes = (np.arange(LAPS) * LAP_S + rng.uniform(1, LAP_S - 1, LAPS)) * HZ
    speed[spikes.astype(int)] += rng.uniform(15, 30, LAPS)  # a sharp, one-sample top speed
    return streams.gnss(n, hz=HZ, speed=speed), spikes.astype(int)


def _per_lap_max(table: pa.Table) -> np.ndarray:
    t = (table.column("ts").cast(pa.int64()).to_numpy() - streams.T0_US) / 1e6
    lap = (t // LAP_S).astype(int)
    speed = table.column("speed_mps").to_numpy()
    return np.array([speed[lap == i].max() for i in range(LAPS)])


def _levels(datasets: dict[str, pa.Table]) -> dict[str, pa.Table]:
    out: dict[str, pa.Table] = {}
    l0 = downsample.run_l0(StageInput(datasets=datasets))
    out.update(l0.datasets)
    for run in (downsample.run_l1, downsample.run_l2):
        out.update(run(StageInput(datasets=l0.datasets)).datasets)
    return out


def test_every_laps_top_speed_survives_in_l2() -> None:
    gnss, spikes = _lap_series()
    levels = _levels({"gnss": gnss})
    top0 = _per_lap_max(levels["gnss_L0"])
    for level in ("gnss_L1", "gnss_L2"):
        top = _per_lap_max(levels[level])
        assert np.all(np.abs(top - top0) <= 0.01 * top0), level
    l2 = levels["gnss_L2"]
    assert l2.num_rows < gnss.num_rows / 8
    peak_times = gnss.column("ts").take(pa.array(spikes))
    assert pc.all(pc.is_in(peak_times, l2.column("ts"))).as_py()


def test_imu_extremes_of_every_axis_survive() -> None:
    imu = streams.imu(60_000)  # 10 minutes at 100 Hz
    gz = imu.column("gz_rps").to_numpy().copy()
    gz[12_345] = 42.0
    gz[54_321] = -42.0
    imu = imu.set_column(imu.column_names.index("gz_rps"), "gz_rps", pa.array(gz))
    levels = _levels({"imu": imu})
    l2 = levels["imu_L2"]
    assert l2.num_rows < imu.num_rows / 20
    for col in canonical.CANONICAL_UNITS["imu"]:
        full = imu.column(col).to_numpy()
        small = l2.column(col).to_numpy()
        assert (small.max(), small.min()) == (full.max(), full.min()), col


def test_levels_keep_the_canonical_schema_and_names() -> None:
    aux = pa.concat_tables(
        [
            streams.aux("heart_rate", [100.0 + i % 7 for i in range(600)]),
            streams.aux("cadence", [80.0 - i % 5 for i in range(600)]),
        ]
    )
    levels = _levels({"gnss": streams.gnss(100), "imu": streams.imu(1000), "aux": aux})
    assert set(levels) == {f"{s}_{lv}" for s in canonical.STREAMS for lv in canonical.LEVELS}
    for name, table in levels.items():
        stream = name.split("_")[0]
        assert table.schema.names == canonical.SCHEMAS[stream].names
        ts = table.column("ts").cast(pa.int64()).to_numpy()
        assert (np.diff(ts) >= 0).all(), name
    l2 = levels["aux_L2"]
    for channel, lo, hi in (("heart_rate", 100.0, 106.0), ("cadence", 76.0, 80.0)):
        values = l2.filter(pc.equal(l2.column("channel"), channel)).column("value").to_numpy()
        assert (values.min(), values.max()) == (lo, hi)


def test_l0_sorts_and_drops_nothing_else() -> None:
    imu = streams.imu(100)
    shuffled = imu.take(pa.array(np.random.default_rng(1).permutation(100)))
    l0 = downsample.run_l0(StageInput(datasets={"imu": shuffled})).datasets["imu_L0"]
    assert l0.equals(imu)


def test_bucket_width_is_widened_for_long_sessions() -> None:
    gnss = streams.gnss(36_000, hz=1.0)  # ten hours at 1 Hz
    out = downsample.run_l2(
        StageInput(datasets={"gnss": gnss}, config={"downsample": {"L2_bucket_s": 1.0}})
    )
    assert out.summary["bucket_s"]["gnss"] == pytest.approx(35_999 / 2_000)
    assert out.summary["rows_out"]["gnss"] <= 6 * 2001


def test_invalid_bucket_config() -> None:
    with pytest.raises(SessionStageError) as err:
        downsample.run_l1(
            StageInput(
                datasets={"gnss": streams.gnss(10)}, config={"downsample": {"L1_bucket_s": 0}}
            )
        )
    assert err.value.code == "INVALID_CONFIG"


def test_select_extremes_ignores_nan() -> None:
    group = np.array([0, 0, 0, 0, 1, 1, 1])
    values = np.array([1.0, np.nan, 5.0, 2.0, np.nan, np.nan, np.nan])
    keep = downsample.select_extremes(group, [values]).tolist()
    assert keep == [0, 2, 3, 4, 6]


def test_l2_fed_by_l1_alone_keeps_the_peaks() -> None:
    gnss, _ = _lap_series()
    l1 = downsample.run_l1(StageInput(datasets={"gnss": gnss})).datasets
    l2 = downsample.run_l2(StageInput(datasets=l1)).datasets["gnss_L2"]
    assert l2.num_rows > 0
    assert np.array_equal(_per_lap_max(l2), _per_lap_max(gnss))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=60),
    st.lists(st.floats(-1e6, 1e6) | st.just(float("nan")), min_size=60, max_size=60),
)
def test_select_extremes_keeps_every_groups_min_and_max(sizes: list[int], raw: list[float]) -> None:
    group = np.sort(np.array(sizes))
    values = np.array(raw[: len(group)])
    kept = downsample.select_extremes(group, [values])
    for g in np.unique(group):
        members = values[group == g]
        chosen = values[kept][group[kept] == g]
        if np.isnan(members).all():
            continue
        assert np.nanmax(chosen) == np.nanmax(members)
        assert np.nanmin(chosen) == np.nanmin(members)
