"""Planning runs: initial states, pending dependency counts and recorded gating decisions."""

from __future__ import annotations

from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from stages.jobs.job_state import JobState
from stages.jobs.planner import plan_run


def test_default_plan_starts_with_validation_only() -> None:
    plan = plan_run({})
    assert len(plan.jobs) == len(DEFAULT_DAG)
    queued = [j.name for j in plan.jobs if j.state is JobState.QUEUED]
    assert queued == ["artifact_validate"]
    assert plan.open_jobs == len(DEFAULT_DAG)
    assert plan.gating == ()
    assert plan.job("materialise_clickhouse").deps_pending == 4
    assert plan.job("fuse_gnss_imu").pool == "heavy" and plan.job("fuse_gnss_imu").heavy
    assert plan.job("fuse_gnss_imu").max_attempts == 1
    edges = {(e.job, e.depends_on, e.hard) for e in plan.edges}
    assert ("detect_laps", "fuse_gnss_imu", False) in edges
    assert ("detect_segments", "detect_laps", True) in edges
    assert len(plan.edges) == sum(len(s.deps) for s in DEFAULT_DAG.values())


def test_skip_fusion_skips_the_fusion_branch_with_reasons() -> None:
    plan = plan_run({"skip_fusion": True})
    fuse, quality = plan.job("fuse_gnss_imu"), plan.job("fuse_quality_summary")
    assert fuse.state is JobState.SKIPPED and fuse.skip_reason == "FUSION_DISABLED"
    assert quality.state is JobState.SKIPPED and quality.skip_reason == "FUSION_DISABLED"
    decisions = {(d.job, d.reason, d.source) for d in plan.gating}
    assert decisions == {
        ("fuse_gnss_imu", "FUSION_DISABLED", "config"),
        ("fuse_quality_summary", "FUSION_DISABLED", "upstream"),
    }
    # A soft dependency that is skipped no longer counts as pending.
    assert plan.job("detect_laps").deps_pending == 1
    assert plan.job("materialise_clickhouse").deps_pending == 3
    assert plan.open_jobs == len(DEFAULT_DAG) - 2


def test_capabilities_known_up_front_gate_at_plan_time() -> None:
    plan = plan_run({}, {"imu": False, "gnss": False})
    assert plan.job("fuse_gnss_imu").skip_reason == "NO_IMU_STREAM"
    assert plan.job("detect_laps").skip_reason == "NO_GNSS_STREAM"
    # Hard dependents of the laps inherit; build_indexes only waits softly and still runs.
    assert plan.job("detect_segments").skip_reason == "NO_GNSS_STREAM"
    assert plan.job("compute_metrics").skip_reason == "NO_GNSS_STREAM"
    assert plan.job("build_indexes").state is JobState.CREATED
    assert all(j.state is not JobState.SKIPPED for j in plan.jobs if j.critical)


def test_an_activity_without_positions_is_gated_with_its_own_reason() -> None:
    """Issue 32 item 7: an indoor FIT (a GNSS stream without positions) said NO_GNSS_STREAM
    where the docs say NO_POSITION_DATA; its dependents inherit the reason."""
    plan = plan_run({}, {"imu": False, "gnss": False, "gnss_reason": "NO_POSITION_DATA"})
    for job in ("detect_laps", "detect_segments", "compute_metrics"):
        assert plan.job(job).skip_reason == "NO_POSITION_DATA", job
    other = plan_run({}, {"imu": False, "gnss": False, "gnss_reason": "NO_FIX"})
    assert other.job("detect_laps").skip_reason == "NO_GNSS_STREAM"


def test_custom_dag_roots_are_queued() -> None:
    dag = {
        "a": JobSpec(name="a", job_type="noop"),
        "b": JobSpec(name="b", job_type="noop"),
        "c": JobSpec(name="c", job_type="noop", deps=(Dep(on="a"), Dep(on="b", hard=False))),
    }
    plan = plan_run(dag=dag)
    assert [(j.name, j.state, j.deps_pending) for j in plan.jobs] == [
        ("a", JobState.QUEUED, 0), ("b", JobState.QUEUED, 0), ("c", JobState.CREATED, 2),
    ]  # fmt: skip
    assert {j.job_type for j in plan.jobs} == {"noop"}


def test_default_attempts_apply_where_the_dag_sets_none() -> None:
    # TIDEWAY_RETRY__JOB_MAX_ATTEMPTS reaches every job type without its own limit; fusion's
    # own limit of one attempt wins over it.
    plan = plan_run({}, default_attempts=5)
    attempts = {job.name: job.max_attempts for job in plan.jobs}
    assert attempts["fuse_gnss_imu"] == 1
    assert {n: a for n, a in attempts.items() if n != "fuse_gnss_imu"} == {
        n: 5 for n in attempts if n != "fuse_gnss_imu"
    }
    assert {job.max_attempts for job in plan_run({}).jobs} == {1, 3}
