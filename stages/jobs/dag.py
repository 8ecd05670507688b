"""The default processing DAG of spec 000 §4.1 as data: job types, edges, pools, policies.

Edges
-----
Each job type lists what it waits for. A **hard** dependency must *succeed*: when it fails,
is skipped or is cancelled, the dependent is skipped too and inherits the reason (``compute_
metrics`` after a failed ``detect_laps`` is skipped with ``LAP_DETECTION_FAILED``). A **soft**
dependency only has to *finish*, whatever its outcome: it orders work and lets the job use the
output when there is one. Required (critical) jobs only ever hard-depend on required jobs, so an
optional job that fails or is skipped can never block them - ``materialise_clickhouse`` waits
softly for laps, fusion and indexes and runs without them (``validate_dag`` enforces this).

Pools (spec 002 §8 eligibility): ``io`` for artifact and database-bound work, ``cpu`` for the
pure numeric stages, ``heavy`` for fusion, which is also counted against the global heavy limit.
Timeouts are upper bounds per attempt: the soft one makes the worker stop and record a retriable
failure, the hard one lets the reaper take the job back from a worker that did not.

One declaration per job type
----------------------------
A :class:`~stages.jobs.job_spec.JobSpec` is everything the house knows about a job type, and
every table keyed by job type is derived from the DAG it belongs to
(:class:`~stages.jobs.graph.Dag`): the executor table (``stage`` names the pure stage a compute
pool runs, ``executor`` the factory of an event-loop executor - strings, so ``stages`` never
imports ``streams``; ``streams.sessions.job_code`` resolves both), the capability gates, the
user-facing feature flags, the retry policy, the timeouts, the stale threshold after which the
reaper takes the job back from a silent worker (spec 000 §5.3), the pinned version the job's
code belongs to (``version_group``) and the job's outputs: the typed model of its summary
(``summary``) and the rules that read, from it, whether a feature's content is there
(``content``, :mod:`stages.jobs.summaries`). Adding a job type is adding one entry here.

:data:`DEFAULT_DAG` is the standard DAG. The runtime reads no module global: whoever runs a DAG
is given it (the top-level wiring passes this one).
"""

from __future__ import annotations

from typing import Final

from schemas import error_codes as codes
from stages.batch.formats import BAD_INPUT as FORMAT_BAD_INPUT
from stages.jobs import summaries as out
from stages.jobs.gating import Gate
from stages.jobs.graph import POOLS, Dag, DagError, dependents, topological_order, validate_dag
from stages.jobs.job_spec import VERSION_GROUPS, Dep, JobSpec
from stages.jobs.retry import RetryPolicy
from stages.jobs.summaries import ContentRule

__all__ = [
    "DEFAULT_DAG",
    "POOLS",
    "VERSION_GROUPS",
    "Dag",
    "DagError",
    "Dep",
    "JobSpec",
    "dependents",
    "topological_order",
    "validate_dag",
]


# Codes a retry cannot fix: the input itself is the problem (spec 000 §7.1, §9.1). Each format
# declares its own (``FormatSpec.bad_input``: FIT_CORRUPT, NO_SESSION_DATE, ...).
_BAD_INPUT: Final = FORMAT_BAD_INPUT | frozenset(
    {
        codes.UNSUPPORTED_FORMAT,
        codes.CORRUPT_ARTIFACT,
        codes.CHECKSUM_MISMATCH,
        codes.SCHEMA_MISMATCH,
        codes.TOO_LARGE,
        codes.EMPTY_ARTIFACT,
        codes.NO_ARTIFACT,
        codes.INTEGRITY_ERROR,
    }
)


def _deps(hard: tuple[str, ...] = (), soft: tuple[str, ...] = ()) -> tuple[Dep, ...]:
    return tuple(Dep(on=n) for n in hard) + tuple(Dep(on=n, hard=False) for n in soft)


_INTAKE = RetryPolicy(non_retriable=_BAD_INPUT)

# Stale thresholds: workers heartbeat every few seconds from their event loop, whatever the
# stage is computing (stages run in a compute pool), so a silent worker is a lost worker; a
# threshold of a few dozen missed heartbeats tells it from a slow network. Short jobs get a
# short one; fusion and the ClickHouse load, which hold the most work, the longest.
_IO_STALE_S: Final = 60.0
_CPU_STALE_S: Final = 120.0
_LONG_STALE_S: Final = 300.0


def _stage(module: str, function: str = "run") -> str:
    return f"stages.batch.{module}:{function}"


DEFAULT_DAG: Final = Dag(
    (
        JobSpec(
            name="artifact_validate",
            stage=_stage("artifact_validate"),
            pool="io",
            retry=_INTAKE,
            soft_timeout_s=60,
            hard_timeout_s=120,
            stale_after_s=_IO_STALE_S,
            version_group="parser",
        ),
        JobSpec(
            name="artifact_classify",
            stage=_stage("artifact_classify"),
            deps=_deps(("artifact_validate",)),
            pool="io",
            retry=_INTAKE,
            soft_timeout_s=60,
            hard_timeout_s=120,
            stale_after_s=_IO_STALE_S,
            version_group="parser",
            summary=out.ClassifySummary,
        ),
        JobSpec(
            name="parse_raw",
            stage=_stage("parse_raw"),
            deps=_deps(("artifact_classify",)),
            retry=_INTAKE,
            soft_timeout_s=600,
            hard_timeout_s=900,
            stale_after_s=_CPU_STALE_S,
            version_group="parser",
            summary=out.ParseSummary,
        ),
        JobSpec(
            name="normalise_units",
            stage=_stage("normalise_units"),
            deps=_deps(("parse_raw",)),
            stale_after_s=_CPU_STALE_S,
            version_group="parser",
        ),
        JobSpec(
            name="time_align",
            stage=_stage("time_align"),
            deps=_deps(("normalise_units",)),
            stale_after_s=_CPU_STALE_S,
            version_group="parser",
            summary=out.TimelineSummary,
        ),
        JobSpec(
            name="downsample_L0",
            stage=_stage("downsample", "run_l0"),
            deps=_deps(("time_align",)),
            stale_after_s=_CPU_STALE_S,
        ),
        JobSpec(
            name="downsample_L1",
            stage=_stage("downsample", "run_l1"),
            deps=_deps(("downsample_L0",)),
            stale_after_s=_CPU_STALE_S,
        ),
        JobSpec(
            name="downsample_L2",
            stage=_stage("downsample", "run_l2"),
            deps=_deps(("downsample_L1",)),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="OVERVIEW_DOWNSAMPLE_FAILED",
            feature="overview",
        ),
        JobSpec(
            name="fuse_gnss_imu",
            stage=_stage("fuse_gnss_imu"),
            deps=_deps(("time_align",)),
            critical=False,
            pool="heavy",
            heavy=True,
            retry=RetryPolicy(max_attempts=1),
            soft_timeout_s=1200,
            hard_timeout_s=1800,
            stale_after_s=_LONG_STALE_S,
            failed_reason="FUSION_FAILED",
            feature="fusion",
            version_group="fusion",
            gates=(
                Gate(
                    reason="FUSION_DISABLED",
                    source="config",
                    detail="config skip_fusion is true",
                    test=lambda c, k: c.get("skip_fusion") is True,
                ),
                Gate(
                    reason="NO_IMU_STREAM",
                    source="capabilities",
                    detail="no IMU stream in the session",
                    test=lambda c, k: k.get("imu") is False,
                ),
                Gate(
                    reason="GNSS_QUALITY_INSUFFICIENT",
                    source="capabilities",
                    detail="GNSS quality too low for fusion",
                    test=lambda c, k: k.get("gnss_quality") == "insufficient",
                ),
            ),
            summary=out.FusionSummary,
            content=(
                ContentRule(feature="fusion", flag="fused", reason="reason", also=("degraded",)),
            ),
        ),
        JobSpec(
            name="fuse_quality_summary",
            stage=_stage("fuse_quality_summary"),
            deps=_deps(("fuse_gnss_imu",)),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="FUSION_QUALITY_FAILED",
            feature="fusion_quality",
            version_group="fusion",
            summary=out.FusionQualitySummary,
        ),
        JobSpec(
            name="detect_laps",
            stage=_stage("detect_laps"),
            deps=_deps(("downsample_L0",), ("fuse_gnss_imu",)),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="LAP_DETECTION_FAILED",
            feature="laps",
            gates=(
                Gate(
                    reason="LAPS_DISABLED",
                    source="config",
                    detail="config skip_laps is true",
                    test=lambda c, k: c.get("skip_laps") is True,
                ),
                Gate(  # a FIT activity recorded without GNSS (indoor): its own reason
                    reason="NO_POSITION_DATA",
                    source="capabilities",
                    detail="the activity was recorded without positions",
                    test=lambda c, k: (
                        k.get("gnss") is False and k.get("gnss_reason") == "NO_POSITION_DATA"
                    ),
                ),
                Gate(
                    reason="NO_GNSS_STREAM",
                    source="capabilities",
                    detail="no GNSS stream in the session",
                    test=lambda c, k: k.get("gnss") is False,
                ),
            ),
            summary=out.LapsSummary,
            content=(
                ContentRule(
                    feature="laps", flag="laps_available", reason="reason", fallback="NO_LAPS"
                ),
            ),
        ),
        JobSpec(
            name="detect_segments",
            stage=_stage("detect_segments"),
            deps=_deps(("detect_laps",)),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="SEGMENT_DETECTION_FAILED",
            feature="segments",
            gates=(
                Gate(
                    reason="SEGMENTS_DISABLED",
                    source="config",
                    detail="config skip_segments is true",
                    test=lambda c, k: c.get("skip_segments") is True,
                ),
            ),
            summary=out.SegmentsSummary,
            content=(
                ContentRule(
                    feature="segments",
                    flag="segments_available",
                    reason="reason",
                    fallback="NO_SEGMENTS",
                ),
                ContentRule(
                    feature="jumps",
                    flag="jumps_available",
                    reason="jumps_reason",
                    fallback="NO_JUMPS",
                ),
            ),
        ),
        JobSpec(
            name="compute_metrics",
            stage=_stage("compute_metrics"),
            deps=_deps(("detect_laps",), ("detect_segments",)),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="METRICS_FAILED",
            feature="lap_compare",
            summary=out.MetricsSummary,
            content=(
                ContentRule(
                    feature="lap_compare",
                    flag="lap_compare_available",
                    fallback="FEWER_THAN_2_VALID_LAPS",
                ),
            ),
        ),
        JobSpec(
            name="build_indexes",
            stage=_stage("build_indexes"),
            deps=_deps(("downsample_L0",), ("detect_laps", "detect_segments", "compute_metrics")),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="INDEXING_FAILED",
            feature="indexes",
            summary=out.IndexesSummary,
        ),
        JobSpec(
            name="materialise_clickhouse",
            executor="streams.sessions.materialise:materialise_executor",
            deps=_deps(
                ("downsample_L1",), ("downsample_L2", "fuse_quality_summary", "build_indexes")
            ),
            pool="io",
            soft_timeout_s=600,
            hard_timeout_s=900,
            stale_after_s=_LONG_STALE_S,
            summary=out.MaterialiseSummary,
        ),
        JobSpec(
            name="publish_session",
            executor="streams.sessions.publish_session:publish_executor",
            deps=_deps(("materialise_clickhouse",)),
            pool="io",
            soft_timeout_s=60,
            hard_timeout_s=120,
            stale_after_s=_IO_STALE_S,
        ),
    )
)
