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
A :class:`JobSpec` is everything the house knows about a job type, and every table keyed by job
type is derived from :data:`DEFAULT_DAG`: the executor table (``stage`` names the pure stage a
compute pool runs, ``executor`` the factory of an event-loop executor - strings, so ``stages``
never imports ``streams``), the capability gates (:data:`GATES`), the user-facing feature flags
(:data:`FEATURES`), the retry policy, the timeouts, the stale threshold after which the reaper
takes the job back from a silent worker (spec 000 §5.3) and the pinned version the job's code
belongs to (``version_group``). Adding a job type is adding one entry here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from schemas import error_codes as codes
from stages.batch.formats import BAD_INPUT as FORMAT_BAD_INPUT
from stages.errors import StageError
from stages.jobs.gating import Gate
from stages.jobs.retry import RetryPolicy
from stages.jobs.run_state import Feature

POOLS: Final = ("io", "cpu", "heavy")
VERSION_GROUPS: Final = ("parser", "pipeline", "fusion")

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


@dataclass(frozen=True, kw_only=True)
class Dep:
    """``on`` must finish first; ``hard``: it must also succeed."""

    on: str
    hard: bool = True


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """One node of a DAG and the one declaration of its job type (see the module docstring).

    ``name`` is unique in a run; ``job_type`` picks the executor. ``stage`` is the
    ``module:function`` of a pure stage (run in the compute pool), ``executor`` the
    ``module:factory`` of an event-loop executor built from the executor table's resources;
    a DAG used only with hand-made executors (tests, benchmarks) sets neither.
    ``stale_after_s``: a running job whose worker has not heartbeated for this long is taken
    back by the reaper (a lost worker, not a failure of the job). ``gates`` skip the job when
    config or capabilities rule it out; ``feature`` is the user-facing flag it produces.
    """

    name: str
    job_type: str = ""
    critical: bool = True
    pool: str = "cpu"
    heavy: bool = False
    deps: tuple[Dep, ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    soft_timeout_s: float = 300.0
    hard_timeout_s: float = 600.0
    stale_after_s: float = 120.0
    failed_reason: str = ""
    stage: str = ""
    executor: str = ""
    gates: tuple[Gate, ...] = ()
    feature: str = ""
    version_group: str = "pipeline"

    def __post_init__(self) -> None:
        if not self.job_type:
            object.__setattr__(self, "job_type", self.name)
        if not self.failed_reason:
            object.__setattr__(self, "failed_reason", f"{self.name.upper()}_FAILED")
        if not 0 < self.soft_timeout_s <= self.hard_timeout_s:
            raise ValueError(f"{self.name}: need 0 < soft_timeout_s <= hard_timeout_s")
        if self.stale_after_s <= 0:
            raise ValueError(f"{self.name}: need stale_after_s > 0")
        if self.stage and self.executor:
            raise ValueError(f"{self.name}: a stage or an executor, not both")
        if self.version_group not in VERSION_GROUPS:
            raise ValueError(f"{self.name}: unknown version group {self.version_group!r}")
        # A gate belongs to the job type it is declared on.
        object.__setattr__(
            self, "gates", tuple(replace(g, job_type=self.job_type) for g in self.gates)
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


DEFAULT_DAG: Final[Mapping[str, JobSpec]] = {
    spec.name: spec
    for spec in (
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
                Gate(
                    reason="NO_GNSS_STREAM",
                    source="capabilities",
                    detail="no GNSS stream in the session",
                    test=lambda c, k: k.get("gnss") is False,
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
        ),
        JobSpec(
            name="compute_metrics",
            stage=_stage("compute_metrics"),
            deps=_deps(("detect_laps",), ("detect_segments",)),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="METRICS_FAILED",
            feature="lap_compare",
        ),
        JobSpec(
            name="build_indexes",
            stage=_stage("build_indexes"),
            deps=_deps(("downsample_L0",), ("detect_laps", "detect_segments", "compute_metrics")),
            critical=False,
            stale_after_s=_CPU_STALE_S,
            failed_reason="INDEXING_FAILED",
            feature="indexes",
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
}

FEATURES: Final[tuple[Feature, ...]] = tuple(
    Feature(name=spec.feature, job_type=spec.job_type, failed_reason=spec.failed_reason)
    for spec in DEFAULT_DAG.values()
    if spec.feature
)
"""User-facing features of spec 000 §11 and the job producing each."""

GATES: Final[tuple[Gate, ...]] = tuple(g for spec in DEFAULT_DAG.values() for g in spec.gates)
"""Every capability gate of the default DAG (spec 000 §4.2), in DAG order."""

STAGES: Final[Mapping[str, str]] = {
    spec.job_type: spec.stage for spec in DEFAULT_DAG.values() if spec.stage
}
"""Job type -> ``module:function`` of its pure stage."""


class DagError(StageError):
    """A DAG definition breaks a structural rule (cycle, unknown dep, required on optional)."""

    code = "INVALID_DAG"


def validate_dag(specs: Mapping[str, JobSpec]) -> None:
    """Check names, pools, that deps exist, that there is no cycle, and the criticality rule."""
    for name, spec in specs.items():
        if name != spec.name:
            raise DagError(f"{name}: key and spec name differ")
        if spec.pool not in POOLS:
            raise DagError(f"{name}: unknown pool {spec.pool!r}")
        for dep in spec.deps:
            target = specs.get(dep.on)
            if target is None:
                raise DagError(f"{name}: depends on unknown job {dep.on!r}")
            if spec.critical and dep.hard and not target.critical:
                raise DagError(f"{name}: required job hard-depends on optional {dep.on!r}")
    topological_order(specs)


def topological_order(specs: Mapping[str, JobSpec]) -> list[str]:
    """Job names with every dependency before its dependents (raises on a cycle)."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise DagError(f"cycle: {' -> '.join((*path, name))}")
        state[name] = 1
        for dep in specs[name].deps:
            visit(dep.on, (*path, name))
        state[name] = 2
        order.append(name)

    for name in specs:
        visit(name, ())
    return order


def dependents(specs: Mapping[str, JobSpec], names: Iterable[str]) -> set[str]:
    """Every job that (transitively, through any edge) waits for one of ``names``."""
    wanted = set(names)
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for spec in specs.values():
            if spec.name not in found and any(d.on in wanted | found for d in spec.deps):
                found.add(spec.name)
                changed = True
    return found


def failed_reason(job_type: str) -> str:
    """The reason code dependents and feature flags inherit when a job of this type fails."""
    spec = DEFAULT_DAG.get(job_type)
    return spec.failed_reason if spec is not None else f"{job_type.upper()}_FAILED"
