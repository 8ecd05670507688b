"""The run state machine of spec 000 §7.2 and the reducer that derives it from job outcomes.

Theory of operation
-------------------
A run is ``pending`` until a job starts, then ``running``. It ends:

- ``failed`` as soon as a *critical* (required) job fails or is skipped: the run can no longer
  be published, so the engine stops the rest of it at once;
- ``cancelled`` when the run (or one of its critical jobs) is cancelled;
- ``partial`` when every critical job succeeded but an optional one failed or was cancelled;
- ``succeeded`` when every critical job succeeded and the optional ones either succeeded or
  were legitimately skipped by gating (spec 000 §7.2).

``features_available`` / ``feature_reasons`` (spec 000 §11) map each user-facing feature to
the job that produces it: available iff that job succeeded, otherwise a stable reason code -
the job's skip reason (``NO_IMU_STREAM``, or the reason inherited from a failed upstream job),
its feature-specific failure code (``LAP_DETECTION_FAILED``) or ``CANCELLED``. A job that
succeeded may still have found nothing: the run summary's ``features`` map (written by
``publish_session`` from the stage summaries, ``{"laps": {"available": false, "reason":
"TRACK_NOT_CLOSED"}}``) narrows the flags, and its reason replaces the job's. The reducer
applies both, so the flags stored on the run are the only ones: ``runs show``, ``sessions
show``, ``upload --wait`` and the API all read them as stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from schemas import error_codes as codes
from stages.jobs.job_state import TERMINAL, JobState
from stages.transitions import Transitions


class RunState(StrEnum):
    """Every state a processing run can be in (stored in ``processing_runs.status``)."""

    PENDING = "pending"
    RUNNING = "running"
    PARTIAL = "partial"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"


R = RunState

TRANSITIONS: Final[Mapping[RunState, frozenset[RunState]]] = {
    R.PENDING: frozenset({R.RUNNING, R.FAILED, R.CANCELLED}),
    R.RUNNING: frozenset({R.PARTIAL, R.FAILED, R.SUCCEEDED, R.CANCELLED}),
    R.PARTIAL: frozenset(),
    R.FAILED: frozenset(),
    R.SUCCEEDED: frozenset(),
    R.CANCELLED: frozenset(),
}

TERMINAL_RUN: Final = frozenset(s for s, targets in TRANSITIONS.items() if not targets)

# Job states that show the run has started (a worker touched at least one job).
_STARTED: Final = frozenset(
    {
        JobState.RUNNING,
        JobState.CANCEL_REQUESTED,
        JobState.RETRY_WAIT,
        JobState.SUCCEEDED,
        JobState.FAILED,
    }
)


RUN_MACHINE: Final = Transitions(table=TRANSITIONS, name="run", code=codes.ILLEGAL_RUN_TRANSITION)
"""The machine; illegal moves raise ``ILLEGAL_RUN_TRANSITION``."""

can_transition = RUN_MACHINE.can
check_transition = RUN_MACHINE.check
sql_pairs = RUN_MACHINE.sql_pairs


@dataclass(frozen=True, kw_only=True)
class JobOutcome:
    """What the reducer needs to know about one job of the run."""

    name: str
    job_type: str
    critical: bool
    state: JobState
    skip_reason: str | None = None
    error_code: str | None = None


@dataclass(frozen=True, kw_only=True)
class Feature:
    """A user-facing feature, the job type producing it and its failure reason code."""

    name: str
    job_type: str
    failed_reason: str


@dataclass(frozen=True, kw_only=True)
class RunVerdict:
    """The reducer's answer: the run's state, its feature flags and why it failed (if so)."""

    state: RunState
    features_available: Mapping[str, bool]
    feature_reasons: Mapping[str, str]
    failure_reason: str | None = None


def reduce_run(
    jobs: Sequence[JobOutcome],
    *,
    cancelled: bool = False,
    features: Sequence[Feature] = (),
    content: Mapping[str, Any] | None = None,
) -> RunVerdict:
    """Derive a run's state from its jobs (``cancelled``: the run itself was cancelled) and its
    feature flags from them, narrowed by ``content`` (the run summary's ``features`` map)."""
    state, reason = _state(jobs, cancelled=cancelled)
    available, reasons = narrow_by_content(*feature_flags(jobs, features), content)
    return RunVerdict(
        state=state, features_available=available, feature_reasons=reasons, failure_reason=reason
    )


def _state(jobs: Sequence[JobOutcome], *, cancelled: bool) -> tuple[RunState, str | None]:
    if cancelled:
        return R.CANCELLED, None
    for job in jobs:
        if job.critical and job.state in (JobState.FAILED, JobState.SKIPPED):
            why = job.error_code if job.state is JobState.FAILED else job.skip_reason
            return R.FAILED, f"{job.name}: {why or job.state.value}"
    if any(job.critical and job.state is JobState.CANCELLED for job in jobs):
        return R.CANCELLED, None
    if not all(job.state in TERMINAL for job in jobs):
        started = any(job.state in _STARTED for job in jobs)
        return (R.RUNNING if started else R.PENDING), None
    optional_lost = any(
        not job.critical and job.state in (JobState.FAILED, JobState.CANCELLED) for job in jobs
    )
    return (R.PARTIAL if optional_lost else R.SUCCEEDED), None


def feature_flags(
    jobs: Sequence[JobOutcome], features: Sequence[Feature]
) -> tuple[dict[str, bool], dict[str, str]]:
    """``features_available`` and ``feature_reasons`` (reasons only for unavailable ones)."""
    by_type = {job.job_type: job for job in jobs}
    available: dict[str, bool] = {}
    reasons: dict[str, str] = {}
    for feature in features:
        job = by_type.get(feature.job_type)
        available[feature.name] = job is not None and job.state is JobState.SUCCEEDED
        if job is None:
            reasons[feature.name] = "NOT_PLANNED"
        elif job.state is not JobState.SUCCEEDED:
            reasons[feature.name] = outcome_reason(job, feature.failed_reason)
    return available, reasons


def narrow_by_content(
    available: Mapping[str, bool], reasons: Mapping[str, str], content: Mapping[str, Any] | None
) -> tuple[dict[str, bool], dict[str, str]]:
    """Job-state flags narrowed by what the content offers (per feature ``{"available",
    "reason"}``): available only when the job succeeded *and* its content is there; the
    content's reason (``TRACK_NOT_CLOSED``) replaces a missing one, and a job's own failure
    reason is kept."""
    flags, why = dict(available), dict(reasons)
    for feature, found in (content or {}).items():
        if not isinstance(found, Mapping):
            continue
        if not found.get("available") and flags.get(feature, True):
            flags[feature] = False
            why[feature] = found.get("reason") or "UNAVAILABLE"
        elif feature not in flags:
            flags[feature] = bool(found.get("available"))
    return flags, why


def outcome_reason(job: JobOutcome, failed_reason: str) -> str:
    """The stable code explaining why ``job`` produced nothing (or ``PENDING`` if unfinished)."""
    if job.state is JobState.SKIPPED:
        return job.skip_reason or "SKIPPED"
    if job.state is JobState.FAILED:
        return failed_reason
    if job.state is JobState.CANCELLED:
        return "CANCELLED"
    return "PENDING"
