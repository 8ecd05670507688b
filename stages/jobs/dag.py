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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from schemas import error_codes as codes
from stages.errors import StageError
from stages.jobs.retry import RetryPolicy
from stages.jobs.run_state import Feature

POOLS: Final = ("io", "cpu", "heavy")

# Codes a retry cannot fix: the input itself is the problem (spec 000 §7.1, §9.1).
_BAD_INPUT: Final = frozenset(
    {
        codes.UNSUPPORTED_FORMAT,
        codes.CORRUPT_ARTIFACT,
        codes.FIT_CORRUPT,
        codes.FIT_NOT_ACTIVITY,
        codes.NO_SESSION_DATE,
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
    """One node of a DAG. ``name`` is unique in a run; ``job_type`` picks the executor."""

    name: str
    job_type: str = ""
    critical: bool = True
    pool: str = "cpu"
    heavy: bool = False
    deps: tuple[Dep, ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    soft_timeout_s: float = 300.0
    hard_timeout_s: float = 600.0
    failed_reason: str = ""

    def __post_init__(self) -> None:
        if not self.job_type:
            object.__setattr__(self, "job_type", self.name)
        if not self.failed_reason:
            object.__setattr__(self, "failed_reason", f"{self.name.upper()}_FAILED")
        if not 0 < self.soft_timeout_s <= self.hard_timeout_s:
            raise ValueError(f"{self.name}: need 0 < soft_timeout_s <= hard_timeout_s")


def _deps(hard: tuple[str, ...] = (), soft: tuple[str, ...] = ()) -> tuple[Dep, ...]:
    return tuple(Dep(on=n) for n in hard) + tuple(Dep(on=n, hard=False) for n in soft)


_INTAKE = RetryPolicy(non_retriable=_BAD_INPUT)

DEFAULT_DAG: Final[Mapping[str, JobSpec]] = {
    spec.name: spec
    for spec in (
        JobSpec(
            name="artifact_validate",
            pool="io",
            retry=_INTAKE,
            soft_timeout_s=60,
            hard_timeout_s=120,
        ),
        JobSpec(
            name="artifact_classify",
            deps=_deps(("artifact_validate",)),
            pool="io",
            retry=_INTAKE,
            soft_timeout_s=60,
            hard_timeout_s=120,
        ),
        JobSpec(
            name="parse_raw",
            deps=_deps(("artifact_classify",)),
            retry=_INTAKE,
            soft_timeout_s=600,
            hard_timeout_s=900,
        ),
        JobSpec(name="normalise_units", deps=_deps(("parse_raw",))),
        JobSpec(name="time_align", deps=_deps(("normalise_units",))),
        JobSpec(name="downsample_L0", deps=_deps(("time_align",))),
        JobSpec(name="downsample_L1", deps=_deps(("downsample_L0",))),
        JobSpec(
            name="downsample_L2",
            deps=_deps(("downsample_L1",)),
            critical=False,
            failed_reason="OVERVIEW_DOWNSAMPLE_FAILED",
        ),
        JobSpec(
            name="fuse_gnss_imu",
            deps=_deps(("time_align",)),
            critical=False,
            pool="heavy",
            heavy=True,
            retry=RetryPolicy(max_attempts=1),
            soft_timeout_s=1200,
            hard_timeout_s=1800,
            failed_reason="FUSION_FAILED",
        ),
        JobSpec(
            name="fuse_quality_summary",
            deps=_deps(("fuse_gnss_imu",)),
            critical=False,
            failed_reason="FUSION_QUALITY_FAILED",
        ),
        JobSpec(
            name="detect_laps",
            deps=_deps(("downsample_L0",), ("fuse_gnss_imu",)),
            critical=False,
            failed_reason="LAP_DETECTION_FAILED",
        ),
        JobSpec(
            name="detect_segments",
            deps=_deps(("detect_laps",)),
            critical=False,
            failed_reason="SEGMENT_DETECTION_FAILED",
        ),
        JobSpec(
            name="compute_metrics",
            deps=_deps(("detect_laps",), ("detect_segments",)),
            critical=False,
            failed_reason="METRICS_FAILED",
        ),
        JobSpec(
            name="build_indexes",
            deps=_deps(("downsample_L0",), ("detect_laps", "detect_segments", "compute_metrics")),
            critical=False,
            failed_reason="INDEXING_FAILED",
        ),
        JobSpec(
            name="materialise_clickhouse",
            deps=_deps(
                ("downsample_L1",), ("downsample_L2", "fuse_quality_summary", "build_indexes")
            ),
            pool="io",
            soft_timeout_s=600,
            hard_timeout_s=900,
        ),
        JobSpec(
            name="publish_session",
            deps=_deps(("materialise_clickhouse",)),
            pool="io",
            soft_timeout_s=60,
            hard_timeout_s=120,
        ),
    )
}

FEATURES: Final[tuple[Feature, ...]] = tuple(
    Feature(name=name, job_type=job_type, failed_reason=DEFAULT_DAG[job_type].failed_reason)
    for name, job_type in (
        ("overview", "downsample_L2"),
        ("fusion", "fuse_gnss_imu"),
        ("fusion_quality", "fuse_quality_summary"),
        ("laps", "detect_laps"),
        ("segments", "detect_segments"),
        ("lap_compare", "compute_metrics"),
        ("indexes", "build_indexes"),
    )
)
"""User-facing features of spec 000 §11 and the job producing each."""


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
