"""Gates: which optional jobs config and capabilities rule out."""

from __future__ import annotations

from functools import partial

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.gating import Candidate, capabilities_of
from stages.jobs.gating import evaluate as evaluate_with

GATES = DEFAULT_DAG.gates
evaluate = partial(evaluate_with, gates=GATES)

FUSE = Candidate(name="fuse_gnss_imu", job_type="fuse_gnss_imu")
LAPS = Candidate(name="detect_laps", job_type="detect_laps")


def test_no_facts_no_gating() -> None:
    assert evaluate([FUSE, LAPS]) == []
    assert evaluate([FUSE], capabilities={"imu": True, "gnss_quality": "degraded"}) == []


def test_capabilities_gate_and_config_wins_first() -> None:
    [d] = evaluate([FUSE], capabilities={"imu": False})
    assert (d.job, d.reason, d.source) == ("fuse_gnss_imu", "NO_IMU_STREAM", "capabilities")
    [d] = evaluate([FUSE], config={"skip_fusion": True}, capabilities={"imu": False})
    assert d.reason == "FUSION_DISABLED"
    [d] = evaluate([FUSE], capabilities={"gnss_quality": "insufficient"})
    assert d.reason == "GNSS_QUALITY_INSUFFICIENT"
    [d] = evaluate([LAPS, FUSE], config={"skip_laps": True})
    assert d.job == "detect_laps" and d.as_json()["reason"] == "LAPS_DISABLED"


def test_gates_only_target_optional_jobs() -> None:
    for gate in GATES:
        assert not DEFAULT_DAG[gate.job_type].critical


def test_gates_are_declared_on_their_job_type() -> None:
    assert {g.job_type for g in GATES} == {"fuse_gnss_imu", "detect_laps", "detect_segments"}
    for spec in DEFAULT_DAG.values():
        assert all(g.job_type == spec.job_type for g in spec.gates)


def test_capabilities_of_summary() -> None:
    assert capabilities_of({"capabilities": {"imu": False}}) == {"imu": False}
    assert capabilities_of({"capabilities": {}}) is None
    assert capabilities_of({"rows": 3}) is None
    assert capabilities_of(None) is None
