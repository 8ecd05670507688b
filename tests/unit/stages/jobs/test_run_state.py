"""The run table, and the reducer from job outcomes to run state and feature flags."""

from __future__ import annotations

import itertools

import pytest

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.job_state import JobState
from stages.jobs.run_state import (
    JobOutcome,
    RunState,
    can_transition,
    check_transition,
    reduce_run,
)
from stages.transitions import IllegalTransition

R = RunState
S = JobState
LEGAL = {
    (R.PENDING, R.RUNNING), (R.PENDING, R.FAILED), (R.PENDING, R.CANCELLED),
    (R.RUNNING, R.PARTIAL), (R.RUNNING, R.FAILED), (R.RUNNING, R.SUCCEEDED),
    (R.RUNNING, R.CANCELLED),
}  # fmt: skip


@pytest.mark.parametrize("pair", list(itertools.product(RunState, RunState)), ids=str)
def test_every_pair_matches_the_spec(pair: tuple[RunState, RunState]) -> None:
    legal = pair in LEGAL
    assert can_transition(*pair) is legal
    if not legal:
        with pytest.raises(IllegalTransition):
            check_transition(*pair)


def job(name: str, state: JobState, *, critical: bool = True, **kw: str) -> JobOutcome:
    return JobOutcome(name=name, job_type=name, critical=critical, state=state, **kw)


def test_nothing_started_is_pending() -> None:
    jobs = [
        job("a", S.QUEUED),
        job("b", S.CREATED),
        job("fuse_gnss_imu", S.SKIPPED, critical=False, skip_reason="X"),
    ]
    assert reduce_run(jobs).state is R.PENDING


@pytest.mark.parametrize("state", [S.RUNNING, S.RETRY_WAIT, S.SUCCEEDED, S.CANCEL_REQUESTED])
def test_a_started_job_makes_the_run_running(state: JobState) -> None:
    assert reduce_run([job("a", state), job("b", S.CREATED)]).state is R.RUNNING


def test_a_failed_critical_job_fails_the_run_at_once() -> None:
    verdict = reduce_run(
        [
            job("a", S.SUCCEEDED),
            job("b", S.FAILED, error_code="CORRUPT_ARTIFACT"),
            job("c", S.RUNNING),
        ]
    )
    assert verdict.state is R.FAILED
    assert verdict.failure_reason == "b: CORRUPT_ARTIFACT"


def test_a_skipped_critical_job_fails_the_run() -> None:
    verdict = reduce_run([job("a", S.SUCCEEDED), job("b", S.SKIPPED, skip_reason="WHY")])
    assert verdict.state is R.FAILED and verdict.failure_reason == "b: WHY"


def test_cancelled_run_or_critical_job_is_cancelled() -> None:
    assert reduce_run([job("a", S.SUCCEEDED)], cancelled=True).state is R.CANCELLED
    assert reduce_run([job("a", S.CANCELLED), job("b", S.SUCCEEDED)]).state is R.CANCELLED


def test_optional_failure_is_partial_with_reasons() -> None:
    jobs = [
        job("parse_raw", S.SUCCEEDED),
        job("detect_laps", S.FAILED, critical=False, error_code="NO_START_LINE"),
        job("detect_segments", S.SKIPPED, critical=False, skip_reason="LAP_DETECTION_FAILED"),
        job("compute_metrics", S.SKIPPED, critical=False, skip_reason="LAP_DETECTION_FAILED"),
        job("fuse_gnss_imu", S.SUCCEEDED, critical=False),
    ]
    verdict = reduce_run(jobs, features=DEFAULT_DAG.features)
    assert verdict.state is R.PARTIAL
    assert verdict.features_available["fusion"] is True
    assert verdict.features_available["laps"] is False
    assert verdict.feature_reasons["laps"] == "LAP_DETECTION_FAILED"
    assert verdict.feature_reasons["segments"] == "LAP_DETECTION_FAILED"
    assert verdict.feature_reasons["lap_compare"] == "LAP_DETECTION_FAILED"
    assert "fusion" not in verdict.feature_reasons
    assert verdict.feature_reasons["overview"] == "NOT_PLANNED"


def test_gated_skips_still_succeed_and_explain_themselves() -> None:
    jobs = [
        job("parse_raw", S.SUCCEEDED),
        job("fuse_gnss_imu", S.SKIPPED, critical=False, skip_reason="NO_IMU_STREAM"),
        job("fuse_quality_summary", S.SKIPPED, critical=False, skip_reason="NO_IMU_STREAM"),
        job("detect_laps", S.SUCCEEDED, critical=False),
    ]
    verdict = reduce_run(jobs, features=DEFAULT_DAG.features)
    assert verdict.state is R.SUCCEEDED
    assert verdict.features_available["fusion"] is False
    assert verdict.feature_reasons["fusion"] == "NO_IMU_STREAM"
    assert verdict.feature_reasons["fusion_quality"] == "NO_IMU_STREAM"
    assert verdict.features_available["laps"] is True


def test_content_narrows_the_flags_the_run_stores() -> None:
    """A lap detector that succeeded on an open road found no laps: the verdict - the only
    flags stored on the run - says so, with the content's reason."""
    jobs = [
        job("parse_raw", S.SUCCEEDED),
        job("detect_laps", S.SUCCEEDED, critical=False),
        job("compute_metrics", S.SUCCEEDED, critical=False),
    ]
    content = {
        "laps": {"available": False, "reason": "TRACK_NOT_CLOSED"},
        "lap_compare": {"available": False, "reason": "FEWER_THAN_2_VALID_LAPS"},
    }
    verdict = reduce_run(jobs, features=DEFAULT_DAG.features, content=content)
    assert verdict.state is R.SUCCEEDED
    assert verdict.features_available["laps"] is False
    assert verdict.feature_reasons["laps"] == "TRACK_NOT_CLOSED"
    assert verdict.feature_reasons["lap_compare"] == "FEWER_THAN_2_VALID_LAPS"
    assert reduce_run(jobs, features=DEFAULT_DAG.features).features_available["laps"] is True


def test_a_cancelled_optional_job_makes_the_run_partial() -> None:
    jobs = [job("a", S.SUCCEEDED), job("detect_laps", S.CANCELLED, critical=False)]
    verdict = reduce_run(jobs, features=DEFAULT_DAG.features)
    assert verdict.state is R.PARTIAL
    assert verdict.feature_reasons["laps"] == "CANCELLED"
