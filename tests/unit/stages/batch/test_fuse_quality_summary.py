"""fuse_quality_summary: health flags from the fusion's residuals and GNSS gaps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from stages.batch import fuse_gnss_imu, fuse_quality_summary
from stages.batch.contract import StageInput
from tests.unit.stages.batch.sessions import fused, session


def _quality(gnss: pa.Table, imu: pa.Table) -> dict[str, Any]:
    fz = fuse_gnss_imu.run(StageInput(datasets={"gnss": gnss, "imu": imu}))
    out = fuse_quality_summary.run(StageInput(
        datasets={"gnss": gnss, **fz.datasets}, summaries={"fuse_gnss_imu": fz.summary}))
    assert out.summary["skipped"] is False
    assert out.datasets["fusion_health"].num_rows > 0
    return dict(out.summary)


def test_clean_session_is_healthy_and_consistent() -> None:
    s = session(laps=2, seed=0)
    fz = fused(laps=2, seed=0)
    out = fuse_quality_summary.run(StageInput(
        datasets={"gnss": s.gnss, **fz.datasets}, summaries={"fuse_gnss_imu": fz.summary}))
    q = out.summary
    assert q["healthy"] is True and q["flags"] == []
    assert 1.5 < q["innovation"]["nis_mean"] < 2.6  # χ²₂ mean is 2 for a consistent filter
    assert q["innovation"]["outlier_fraction"] < 0.03
    assert q["confidence"]["p50"] > 0.8 and q["gnss_gaps"]["count"] == 0
    health = out.datasets["fusion_health"]
    assert int(np.sum(health.column("fixes").to_numpy())) == s.gnss.num_rows


def test_gnss_gap_is_flagged_and_measured() -> None:
    s = session(laps=2, seed=4, imu_hz=50.0, gnss_gaps=((40.0, 8.0),))
    q = _quality(s.gnss, s.imu)
    gaps = q["gnss_gaps"]
    assert isinstance(gaps, dict) and gaps["count"] == 1
    assert abs(gaps["longest_s"] - 8.0) < 0.15
    assert q["flags"] == ["GNSS_GAPS"] and q["healthy"] is True


def test_a_sustained_gnss_step_is_flagged_where_it_happens() -> None:
    s = session(laps=2, seed=1)
    lat = s.gnss.column("lat_deg").to_numpy().copy()
    lat[600:900] += 25.0 / 111_000  # from 60 s, 30 s of fixes 25 m off, then back
    gnss = s.gnss.set_column(1, s.gnss.schema.field("lat_deg"), pa.array(lat))
    q = _quality(gnss, s.imu)
    # Doppler velocity contradicts the jump, so fixes are rejected and GNSS and filter
    # disagree for as long as the step lasts: that stretch is reported, not the session.
    assert q["healthy"] is False
    assert {"REJECTED_FIXES", "DIVERGENCE"} <= set(q["flags"])
    div = q["divergence"]
    assert isinstance(div, dict) and 1 <= div["windows"] <= 2


def test_flapping_gnss_is_a_divergence() -> None:
    s = session(laps=2, seed=1)
    lat = s.gnss.column("lat_deg").to_numpy().copy()
    idx = np.arange(600, 1200)
    lat[idx[(idx // 3) % 2 == 0]] += 20.0 / 111_000  # multipath flapping for a minute
    gnss = s.gnss.set_column(1, s.gnss.schema.field("lat_deg"), pa.array(lat))
    q = _quality(gnss, s.imu)
    assert "DIVERGENCE" in q["flags"] and q["healthy"] is False
    div = q["divergence"]
    assert isinstance(div, dict) and 1 <= div["windows"] <= 3


def test_skipped_fusion_is_reported_not_hidden() -> None:
    out = fuse_quality_summary.run(StageInput(
        summaries={"fuse_gnss_imu": {"skipped": True, "reason": "NO_IMU_STREAM"}}))
    assert out.summary == {"skipped": True, "reason": "NO_IMU_STREAM", "healthy": False}
