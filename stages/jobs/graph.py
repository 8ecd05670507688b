"""A DAG as the value the runtime is given, and the structural rules every DAG follows.

:class:`Dag` holds a DAG's :class:`~stages.jobs.job_spec.JobSpec` entries by name and the tables
derived from them - the user-facing features, the capability gates, the pure stages, the
producer of each typed summary - so whoever runs a DAG (the worker, the queue functions that
settle and finalise runs, the executor table) is handed one value and looks nothing up in a
module global. ``stages.jobs.dag.DEFAULT_DAG`` is the standard one; the top-level wiring (CLI,
API, service) passes it down.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from stages.errors import StageError
from stages.jobs.gating import Gate
from stages.jobs.job_spec import JobSpec
from stages.jobs.run_state import Feature
from stages.jobs.summaries import Summary

POOLS = ("io", "cpu", "heavy")

S = TypeVar("S", bound=Summary)


class Dag(Mapping[str, JobSpec]):
    """A validated DAG: job specs by name (in declaration order) and what derives from them."""

    def __init__(self, specs: Iterable[JobSpec]) -> None:
        self._specs: dict[str, JobSpec] = {spec.name: spec for spec in specs}
        validate_dag(self._specs)
        self._by_type: dict[str, JobSpec] = {}
        for spec in self._specs.values():
            self._by_type.setdefault(spec.job_type, spec)
        self.features: tuple[Feature, ...] = tuple(
            Feature(name=s.feature, job_type=s.job_type, failed_reason=s.failed_reason)
            for s in self._specs.values()
            if s.feature
        )
        """User-facing features of spec 000 §11 and the job producing each."""
        self.gates: tuple[Gate, ...] = tuple(g for s in self._specs.values() for g in s.gates)
        """Every capability gate (spec 000 §4.2), in DAG order."""
        self.stages: Mapping[str, str] = {
            s.job_type: s.stage for s in self._specs.values() if s.stage
        }
        """Job type -> ``module:function`` of its pure stage."""
        self._producers = {
            s.summary: s.name for s in self._specs.values() if s.summary is not Summary
        }

    def __getitem__(self, name: str) -> JobSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"Dag({list(self._specs)})"

    def spec_of(self, job_type: str) -> JobSpec | None:
        """The spec of job type ``job_type`` (``None``: not in this DAG)."""
        return self._by_type.get(job_type)

    def failed_reason(self, job_type: str) -> str:
        """The reason code dependents and feature flags inherit when a job of this type fails."""
        spec = self._by_type.get(job_type)
        return spec.failed_reason if spec is not None else f"{job_type.upper()}_FAILED"

    def summary(self, model: type[S], summaries: Mapping[str, Mapping[str, Any]]) -> S:
        """The ``model`` summary among ``summaries`` (by job name), read from the job that
        declares it; empty when that job did not run or is not in this DAG."""
        name = self._producers.get(model)
        return model.read(summaries.get(name) if name is not None else None)

    def content_features(self, summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Per feature: is its content there, and why not - from the summaries of jobs that ran
        (by job name), by each job's declared content rules."""
        out: dict[str, Any] = {}
        for spec in self._specs.values():
            raw = summaries.get(spec.name) if spec.content else None
            if raw is None:
                continue
            found = spec.summary.read(raw)
            for rule in spec.content:
                answer = rule.apply(found)
                if answer is not None:
                    out[rule.feature] = answer
        return out


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
