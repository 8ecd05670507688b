"""What a job's summary holds, as a typed model, and what it says about the content.

A job type declares its outputs on its :class:`~stages.jobs.dag.JobSpec`: ``summary`` names
the model of the JSON summary its stage or executor returns (stored as returned in
``jobs.output``), ``content`` the rules that read, from that summary, whether the content a
user-facing feature needs is there (``{"laps": {"available": false, "reason":
"TRACK_NOT_CLOSED"}}``, spec 000 §11). Readers of another job's summary (``publish_session``)
go through the DAG (:meth:`~stages.jobs.graph.Dag.summary`), never through a job name and a
string key.

A model lists only the fields some reader uses; the stored summary keeps every key its stage
wrote. :meth:`Summary.read` copies values as they are - no coercion - so what a reader passes
on (into the run summary) is exactly what the stage wrote; a field the summary lacks is its
default (``None``: the job did not say).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Self


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A job's summary as its readers see it; the base is the model of a job nobody reads."""

    @classmethod
    def read(cls, raw: Mapping[str, Any] | None) -> Self:
        """The model of ``raw`` (``None``: the job did not run or said nothing)."""
        raw = raw or {}
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


@dataclass(frozen=True, kw_only=True)
class ClassifySummary(Summary):
    """``artifact_classify``: the primary artifact's detected format."""

    format: str | None = None


@dataclass(frozen=True, kw_only=True)
class ParseSummary(Summary):
    """``parse_raw``: rows per canonical stream and the capabilities they give the session."""

    rows: dict[str, int] | None = None
    capabilities: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class TimelineSummary(Summary):
    """``time_align``: the session's time origin (microseconds since the epoch)."""

    t0_us: int | None = None


@dataclass(frozen=True, kw_only=True)
class LapsSummary(Summary):
    """``detect_laps``: how many laps, and whether there are any (why not)."""

    lap_count: int | None = None
    laps_available: bool | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class SegmentsSummary(Summary):
    """``detect_segments``: corners, straights and jumps found, and why a kind is missing."""

    corner_count: int | None = None
    straight_count: int | None = None
    jump_count: int | None = None
    segments_available: bool | None = None
    reason: str | None = None
    jumps_available: bool | None = None
    jumps_reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class MetricsSummary(Summary):
    """``compute_metrics``: the best lap and the session's lap statistics."""

    best_lap: int | None = None
    best_lap_time_s: float | None = None
    mean_lap_time_s: float | None = None
    median_lap_time_s: float | None = None
    distance_m: float | None = None
    max_speed_mps: float | None = None
    lap_compare_available: bool | None = None


@dataclass(frozen=True, kw_only=True)
class FusionSummary(Summary):
    """``fuse_gnss_imu``: whether fusion ran (``skipped``, ``reason``) and if it degraded."""

    skipped: bool | None = None
    reason: str | None = None
    degraded: bool | None = None

    @property
    def fused(self) -> bool:
        """Fusion ran (a summary without ``skipped`` is a fusion that ran)."""
        return not self.skipped


@dataclass(frozen=True, kw_only=True)
class FusionQualitySummary(Summary):
    """``fuse_quality_summary``: the fusion's health and its stable flags."""

    healthy: bool | None = None
    flags: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class IndexesSummary(Summary):
    """``build_indexes``: the session's time range (ISO 8601)."""

    session_start: str | None = None
    session_end: str | None = None


@dataclass(frozen=True, kw_only=True)
class MaterialiseSummary(Summary):
    """``materialise_clickhouse``: rows loaded per ClickHouse table."""

    tables: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ContentRule:
    """How a summary says whether ``feature``'s content is there.

    ``flag`` names the summary field (or property) saying so - a summary without it says
    nothing; ``reason`` the field with why not, ``fallback`` the reason when it gives none;
    ``also`` fields reported beside the answer (as booleans).
    """

    feature: str
    flag: str
    reason: str | None = None
    fallback: str | None = None
    also: tuple[str, ...] = ()

    def apply(self, summary: Summary) -> dict[str, Any] | None:
        """``{"available", "reason", *also}`` from ``summary`` (``None``: it says nothing)."""
        flag = getattr(summary, self.flag)
        if flag is None:
            return None
        available = bool(flag)
        why = getattr(summary, self.reason) if self.reason else None
        out = {"available": available, "reason": None if available else why or self.fallback}
        out.update({name: bool(getattr(summary, name)) for name in self.also})
        return out
