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
from typing import Any, Final

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
    """Skip jobs of ``job_type`` with ``reason`` when ``test(config, capabilities)`` holds."""

    job_type: str
    reason: str
    source: str
    detail: str
    test: Callable[[Facts, Facts], bool]


GATES: Final[tuple[Gate, ...]] = (
    Gate(
        job_type="fuse_gnss_imu",
        reason="FUSION_DISABLED",
        source="config",
        detail="config skip_fusion is true",
        test=lambda c, k: c.get("skip_fusion") is True,
    ),
    Gate(
        job_type="fuse_gnss_imu",
        reason="NO_IMU_STREAM",
        source="capabilities",
        detail="no IMU stream in the session",
        test=lambda c, k: k.get("imu") is False,
    ),
    Gate(
        job_type="fuse_gnss_imu",
        reason="GNSS_QUALITY_INSUFFICIENT",
        source="capabilities",
        detail="GNSS quality too low for fusion",
        test=lambda c, k: k.get("gnss_quality") == "insufficient",
    ),
    Gate(
        job_type="detect_laps",
        reason="LAPS_DISABLED",
        source="config",
        detail="config skip_laps is true",
        test=lambda c, k: c.get("skip_laps") is True,
    ),
    Gate(
        job_type="detect_laps",
        reason="NO_GNSS_STREAM",
        source="capabilities",
        detail="no GNSS stream in the session",
        test=lambda c, k: k.get("gnss") is False,
    ),
    Gate(
        job_type="detect_segments",
        reason="SEGMENTS_DISABLED",
        source="config",
        detail="config skip_segments is true",
        test=lambda c, k: c.get("skip_segments") is True,
    ),
)


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
    gates: Iterable[Gate] = GATES,
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
