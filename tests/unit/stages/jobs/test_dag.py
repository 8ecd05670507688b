"""The default DAG's structure and the rules every DAG must follow."""

from __future__ import annotations

import pytest

from stages.jobs.dag import (
    DEFAULT_DAG,
    DagError,
    Dep,
    JobSpec,
    dependents,
    topological_order,
    validate_dag,
)
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS

SPEC_REQUIRED = {
    "artifact_validate", "artifact_classify", "parse_raw", "normalise_units", "time_align",
    "downsample_L1", "materialise_clickhouse", "publish_session",
}  # fmt: skip
SPEC_OPTIONAL = {
    "fuse_gnss_imu", "detect_laps", "detect_segments", "compute_metrics", "build_indexes",
}  # fmt: skip


def test_default_dag_is_valid_and_ordered_like_the_spec() -> None:
    validate_dag(DEFAULT_DAG)
    order = topological_order(DEFAULT_DAG)
    assert order[0] == "artifact_validate" and order[-1] == "publish_session"
    for name, spec in DEFAULT_DAG.items():
        for dep in spec.deps:
            assert order.index(dep.on) < order.index(name)


def test_criticality_follows_spec_7_2() -> None:
    critical = {n for n, s in DEFAULT_DAG.items() if s.critical}
    assert critical >= SPEC_REQUIRED
    assert not SPEC_OPTIONAL & critical
    # downsample_L0 feeds downsample_L1, so it must be required too.
    assert critical == SPEC_REQUIRED | {"downsample_L0"}


def test_optional_jobs_never_block_required_ones() -> None:
    """Every path from an optional job into a required one goes through soft edges."""
    for spec in DEFAULT_DAG.values():
        if spec.critical:
            for dep in spec.deps:
                assert not dep.hard or DEFAULT_DAG[dep.on].critical, (spec.name, dep.on)
    assert Dep(on="build_indexes", hard=False) in DEFAULT_DAG["materialise_clickhouse"].deps


def test_pools_heavy_and_retry_policy() -> None:
    fuse = DEFAULT_DAG["fuse_gnss_imu"]
    assert fuse.pool == "heavy" and fuse.heavy and fuse.retry.max_attempts == 1
    assert sum(s.heavy for s in DEFAULT_DAG.values()) == 1
    assert DEFAULT_DAG["artifact_validate"].pool == "io"
    assert "UNSUPPORTED_FORMAT" in DEFAULT_DAG["parse_raw"].retry.non_retriable
    assert "CHECKSUM_MISMATCH" in DEFAULT_DAG["artifact_validate"].retry.non_retriable
    for spec in DEFAULT_DAG.values():
        assert 0 < spec.soft_timeout_s <= spec.hard_timeout_s
        if spec.name != "fuse_gnss_imu":
            # No limit of its own: the configured TIDEWAY_RETRY__JOB_MAX_ATTEMPTS (default 3).
            assert spec.retry.max_attempts is None
            assert spec.retry.attempts(DEFAULT_MAX_ATTEMPTS) == 3


def test_failed_reasons() -> None:
    assert DEFAULT_DAG.failed_reason("detect_laps") == "LAP_DETECTION_FAILED"
    assert DEFAULT_DAG.failed_reason("fuse_gnss_imu") == "FUSION_FAILED"
    assert DEFAULT_DAG.failed_reason("noop") == "NOOP_FAILED"


def test_structural_errors_are_caught() -> None:
    with pytest.raises(DagError, match="cycle"):
        validate_dag({
            "a": JobSpec(name="a", deps=(Dep(on="b"),)),
            "b": JobSpec(name="b", deps=(Dep(on="a"),)),
        })  # fmt: skip
    with pytest.raises(DagError, match="unknown job"):
        validate_dag({"a": JobSpec(name="a", deps=(Dep(on="nope"),))})
    with pytest.raises(DagError, match="optional"):
        validate_dag({
            "opt": JobSpec(name="opt", critical=False),
            "req": JobSpec(name="req", deps=(Dep(on="opt"),)),
        })  # fmt: skip
    with pytest.raises(DagError, match="pool"):
        validate_dag({"a": JobSpec(name="a", pool="gpu")})
    with pytest.raises(ValueError, match="soft_timeout"):
        JobSpec(name="a", soft_timeout_s=10, hard_timeout_s=5)


def test_dependents_closure() -> None:
    found = dependents(DEFAULT_DAG, ["detect_laps"])
    assert {"detect_segments", "compute_metrics", "build_indexes", "publish_session"} <= found
    assert "downsample_L1" not in found


def test_each_job_type_is_declared_once_with_what_runs_it() -> None:
    for spec in DEFAULT_DAG.values():
        assert bool(spec.stage) != bool(spec.executor), spec.name
        assert spec.stale_after_s > 0 and spec.version_group in ("parser", "pipeline", "fusion")
    assert DEFAULT_DAG.stages["downsample_L1"] == "stages.batch.downsample:run_l1"
    assert DEFAULT_DAG["materialise_clickhouse"].executor.startswith("streams.sessions.")
    assert {f.name: f.job_type for f in DEFAULT_DAG.features}["fusion"] == "fuse_gnss_imu"
    assert [g.reason for g in DEFAULT_DAG.gates if g.job_type == "detect_laps"] == [
        "LAPS_DISABLED",
        "NO_POSITION_DATA",
        "NO_GNSS_STREAM",
    ]
    # Lost workers are told apart faster for short jobs than for fusion.
    assert (
        DEFAULT_DAG["artifact_validate"].stale_after_s < DEFAULT_DAG["fuse_gnss_imu"].stale_after_s
    )


def test_a_spec_runs_a_stage_or_an_executor_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        JobSpec(name="x", stage="m:f", executor="m:g")
    with pytest.raises(ValueError, match="version group"):
        JobSpec(name="x", version_group="nightly")
