"""One job type's declaration: :class:`JobSpec`, and the edges it waits on (:class:`Dep`).

What the fields mean, and how the default DAG uses them, is told in :mod:`stages.jobs.dag`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

from stages.jobs.gating import Gate
from stages.jobs.retry import RetryPolicy
from stages.jobs.summaries import ContentRule, Summary

VERSION_GROUPS: Final = ("parser", "pipeline", "fusion")


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
    ``summary`` is the typed model of the summary the job returns, ``content`` the rules that
    read from it whether a feature's content is there (:mod:`stages.jobs.summaries`).
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
    summary: type[Summary] = Summary
    content: tuple[ContentRule, ...] = ()

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

    @property
    def code(self) -> str:
        """``module:name`` of what runs the job: its stage or its executor factory (or "")."""
        return self.stage or self.executor
