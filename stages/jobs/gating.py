"""Capability gating (spec 000 §4.2): which optional jobs a run skips, and why.

Gates are evaluated twice: when the run is planned (from its config and any capabilities the
upload already declared) and again whenever a job succeeds with a summary that reveals
capabilities, e.g. ``parse_raw`` returning ``{"capabilities": {"imu": false}}``. A gated job
that has not started yet is skipped with the gate's reason; its hard dependents inherit it.
Required jobs are never gated. Every decision is kept in the run's ``gating`` record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Facts = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class GatingDecision:
    """``job`` is skipped with ``reason`` (a stable code); ``source`` says what decided."""

    job: str
    reason: str
    source: str  # "config", "capabilities" or "upstream"
    detail: str

    def as_json(self) -> dict[str, str]:
        return {
            "job": self.job,
            "reason": self.reason,
            "source": self.source,
            "detail": self.detail,
        }


@dataclass(frozen=True, kw_only=True)
class Gate:
    """Skip jobs of ``job_type`` with ``reason`` when ``test(config, capabilities)`` holds.

    Gates are declared on their job type's ``JobSpec`` (``stages.jobs.dag``), which fills in
    ``job_type``; ``stages.jobs.dag.GATES`` lists them all.
    """

    reason: str
    source: str
    detail: str
    test: Callable[[Facts, Facts], bool]
    job_type: str = ""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A job that gating may still skip (optional and not started)."""

    name: str
    job_type: str


def evaluate(
    candidates: Iterable[Candidate],
    *,
    config: Facts | None = None,
    capabilities: Facts | None = None,
    gates: Iterable[Gate],
) -> list[GatingDecision]:
    """The first matching gate for each candidate, in candidate order."""
    cfg, caps = config or {}, capabilities or {}
    rules = list(gates)
    decisions: list[GatingDecision] = []
    for job in candidates:
        for gate in rules:
            if gate.job_type == job.job_type and gate.test(cfg, caps):
                decisions.append(
                    GatingDecision(
                        job=job.name, reason=gate.reason, source=gate.source, detail=gate.detail
                    )
                )
                break
    return decisions


def capabilities_of(summary: Mapping[str, Any] | None) -> Facts | None:
    """The ``capabilities`` a job summary reveals, if any."""
    if not summary:
        return None
    caps = summary.get("capabilities")
    return caps if isinstance(caps, Mapping) and caps else None
