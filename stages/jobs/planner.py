"""Plan a processing run: its jobs, their edges and the gating decisions (spec 000 §4.2).

``plan_run`` walks the DAG in dependency order. A job is ``skipped`` when a gate applies to it
or when a hard dependency is skipped (it inherits that reason); otherwise it starts ``queued``
if every dependency is already finished (only skipped ones at plan time) and ``created`` if not.
``deps_pending`` counts the dependencies still to finish; the queue decrements it as they do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stages.jobs.dag import DEFAULT_DAG, JobSpec, topological_order, validate_dag
from stages.jobs.gating import Candidate, GatingDecision, evaluate
from stages.jobs.job_state import JobState
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS


@dataclass(frozen=True, kw_only=True)
class PlannedJob:
    """One job row to insert."""

    name: str
    job_type: str
    critical: bool
    pool: str
    heavy: bool
    max_attempts: int
    soft_timeout_s: float
    hard_timeout_s: float
    stale_after_s: float
    state: JobState
    deps_pending: int
    skip_reason: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PlannedEdge:
    """``job`` waits for ``depends_on``; ``hard``: it needs it to succeed."""

    job: str
    depends_on: str
    hard: bool


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything ``streams.jobs.queue.enqueue_run`` inserts for a run."""

    jobs: tuple[PlannedJob, ...]
    edges: tuple[PlannedEdge, ...]
    gating: tuple[GatingDecision, ...]

    def job(self, name: str) -> PlannedJob:
        """The planned job called ``name``."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    @property
    def open_jobs(self) -> int:
        """Jobs not finished at plan time (everything but the skipped ones)."""
        return sum(1 for job in self.jobs if job.state is not JobState.SKIPPED)


def plan_run(
    config: Mapping[str, Any] | None = None,
    capabilities: Mapping[str, Any] | None = None,
    *,
    dag: Mapping[str, JobSpec] = DEFAULT_DAG,
    default_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> RunPlan:
    """Plan a run of ``dag`` for ``config`` and the ``capabilities`` known up front.

    A job type whose DAG entry sets no attempt limit gets ``default_attempts``
    (``Settings.retry.job_max_attempts``)."""
    validate_dag(dag)
    order = topological_order(dag)
    optional = [Candidate(name=n, job_type=dag[n].job_type) for n in order if not dag[n].critical]
    gates = [gate for spec in dag.values() for gate in spec.gates]
    decisions = evaluate(optional, config=config, capabilities=capabilities, gates=gates)
    skipped = {d.job: d.reason for d in decisions}
    gating = list(decisions)
    jobs: list[PlannedJob] = []
    for name in order:
        spec = dag[name]
        if name not in skipped:
            inherited = next((d.on for d in spec.deps if d.hard and d.on in skipped), None)
            if inherited is not None:
                skipped[name] = skipped[inherited]
                gating.append(
                    GatingDecision(
                        job=name,
                        reason=skipped[name],
                        source="upstream",
                        detail=f"hard dependency {inherited} is skipped",
                    )
                )
        pending = sum(1 for d in spec.deps if d.on not in skipped)
        if name in skipped:
            state = JobState.SKIPPED
        else:
            state = JobState.QUEUED if pending == 0 else JobState.CREATED
        jobs.append(
            PlannedJob(
                name=name,
                job_type=spec.job_type,
                critical=spec.critical,
                pool=spec.pool,
                heavy=spec.heavy,
                max_attempts=spec.retry.attempts(default_attempts),
                soft_timeout_s=spec.soft_timeout_s,
                hard_timeout_s=spec.hard_timeout_s,
                stale_after_s=spec.stale_after_s,
                state=state,
                deps_pending=pending,
                skip_reason=skipped.get(name),
            )
        )
    edges = tuple(
        PlannedEdge(job=name, depends_on=d.on, hard=d.hard)
        for name in order
        for d in dag[name].deps
    )
    return RunPlan(jobs=tuple(jobs), edges=edges, gating=tuple(gating))
