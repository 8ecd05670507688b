"""Canonical streams -> file (every format, plain and gzip) -> the early stages -> the same
streams again, within each format's documented precision."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from stages.batch import (
    artifact_classify,
    artifact_validate,
    downsample,
    formats,
    normalise_units,
    parse_raw,
    time_align,
)
from stages.batch.contract import StageInput
from tests.unit.stages.batch import sample_streams as streams
from tests.unit.stages.batch.sample_streams import blob

# format, CSV layout, streams the format carries, position tolerance (deg), speed tolerance
CASES = [
    ("nmea", None, ("gnss",), 2e-7, 1e-3),
    ("gpx", None, ("gnss", "aux"), 1e-8, 1e-4),
    ("csv", "canonical", ("gnss", "imu", "aux"), 0.0, 0.0),
    ("csv", "racelog", ("gnss", "imu", "aux"), 0.0, 1e-12),
    ("jsonl", None, ("gnss", "imu", "aux"), 0.0, 0.0),
]


def _source() -> dict[str, pa.Table]:
    n = 200  # 20 s at 10 Hz
    speed = 20 + 10 * np.sin(np.arange(n) / 15.0)
    temperature = [20.0 + 0.5 * i for i in range(20)]
    return {
        "gnss": streams.gnss(n, hz=10.0, speed=speed),
        "imu": streams.imu(2000, hz=100.0),
        "aux": streams.aux("temperature", temperature, hz=1.0),
    }


def _run_stages(data: bytes, name: str) -> dict[str, pa.Table]:
    art = (blob(name, data),)
    artifact_validate.run(StageInput(artifacts=art))
    classified = artifact_classify.run(StageInput(artifacts=art))
    parsed = parse_raw.run(
        StageInput(artifacts=art, summaries={"artifact_classify": classified.summary})
    )
    norm = normalise_units.run(
        StageInput(datasets=parsed.datasets, summaries={"parse_raw": parsed.summary})
    )
    aligned = time_align.run(StageInput(datasets=norm.datasets))
    assert aligned.summary["duplicates_removed"] == 0
    levels = downsample.run_l0(StageInput(datasets=aligned.datasets)).datasets
    assert set(levels) == {"gnss_L0", "imu_L0", "aux_L0"}
    return {k.removesuffix("_L0"): v for k, v in levels.items()}


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize(("fmt", "layout", "carried", "pos_tol", "speed_tol"), CASES)
def test_round_trip(
    fmt: str,
    layout: str | None,
    carried: tuple[str, ...],
    pos_tol: float,
    speed_tol: float,
    compressed: bool,
) -> None:
    src = _source()
    data = formats.write(fmt, src, compressed=compressed, variant=layout)
    got = _run_stages(data, f"session.{fmt}")
    for stream in ("gnss", "imu", "aux"):
        if stream not in carried:
            assert got[stream].num_rows == 0, stream
            continue
        want = src[stream]
        assert got[stream].column("ts").equals(want.column("ts")), stream
    g, w = got["gnss"], src["gnss"]
    for col in ("lat_deg", "lon_deg"):
        err = np.abs(g.column(col).to_numpy() - w.column(col).to_numpy()).max()
        assert err <= pos_tol + 1e-12, col
    speed_err = np.abs(g.column("speed_mps").to_numpy() - w.column("speed_mps").to_numpy())
    assert speed_err.max() <= speed_tol + 1e-12
    if "imu" in carried:
        for col in ("ax_mps2", "ay_mps2", "az_mps2", "gx_rps", "gy_rps", "gz_rps"):
            np.testing.assert_allclose(
                got["imu"].column(col).to_numpy(),
                src["imu"].column(col).to_numpy(),
                rtol=1e-12,
                atol=1e-12,
            )
    if "aux" in carried:
        assert got["aux"].column("channel").to_pylist() == ["temperature"] * 20
        np.testing.assert_allclose(
            got["aux"].column("value").to_numpy(),
            src["aux"].column("value").to_numpy(),
            rtol=1e-12,
            atol=1e-9,
        )
