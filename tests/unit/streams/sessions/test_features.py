"""Feature flags: the engine's job-state view narrowed by what the content offers."""

from __future__ import annotations

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.run_state import narrow_by_content


def test_content_features_from_stage_summaries() -> None:
    features = DEFAULT_DAG.content_features(
        {
            "detect_laps": {"laps_available": False, "reason": "TRACK_NOT_CLOSED"},
            "detect_segments": {
                "segments_available": True,
                "reason": None,
                "jumps_available": False,
                "jumps_reason": "NO_IMU_STREAM",
            },
            "compute_metrics": {"lap_compare_available": False},
            "fuse_gnss_imu": {"skipped": False, "degraded": True},
        }
    )
    assert features == {
        "laps": {"available": False, "reason": "TRACK_NOT_CLOSED"},
        "segments": {"available": True, "reason": None},
        "jumps": {"available": False, "reason": "NO_IMU_STREAM"},
        "lap_compare": {"available": False, "reason": "FEWER_THAN_2_VALID_LAPS"},
        "fusion": {"available": True, "reason": None, "degraded": True},
    }
    assert DEFAULT_DAG.content_features({}) == {}  # jobs that did not run say nothing


def test_a_feature_is_available_only_when_job_and_content_agree() -> None:
    engine = {"laps": True, "segments": True, "fusion": False}
    reasons = {"fusion": "NO_IMU_STREAM"}
    summary = {
        "features": {
            "laps": {"available": False, "reason": "TRACK_NOT_CLOSED"},
            "segments": {"available": True, "reason": None},
            "jumps": {"available": False, "reason": "NO_IMU_STREAM"},
        }
    }
    flags, why = narrow_by_content(engine, reasons, summary["features"])
    assert flags == {"laps": False, "segments": True, "fusion": False, "jumps": False}
    assert why == {"laps": "TRACK_NOT_CLOSED", "fusion": "NO_IMU_STREAM", "jumps": "NO_IMU_STREAM"}
    # The engine's failure reason is kept when the job itself failed.
    flags, why = narrow_by_content({"laps": False}, {"laps": "LAP_DETECTION_FAILED"}, {})
    assert (flags, why) == ({"laps": False}, {"laps": "LAP_DETECTION_FAILED"})
    assert narrow_by_content({}, {}, None) == ({}, {})
