"""Sessions, their laps and tracks, uploads, reprocess and rollback."""

from __future__ import annotations

import datetime as dt
import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from schemas.api.base import Page, Text, _Body, _Query, _Request
from schemas.run_config import RunConfig


class _DescribedAs:
    """Describes a field in the JSON Schema as ``model`` while it validates as its own type:
    the run config is checked by the code that checks every run config (``INVALID_CONFIG``,
    the key named), and the document shows the config's keys."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


class SessionQuery(_Query):
    device: Text | None = Field(None, max_length=200, description="Only this device's sessions.")


class SessionSummary(_Body):
    id: uuid.UUID
    device: str
    status: str
    query_ready: bool
    active_run_id: uuid.UUID | None
    title: str | None
    created_at: datetime
    latest_run_status: str | None


class SessionPage(Page[SessionSummary]):
    """The caller's sessions, newest first."""


class SessionRun(_Body):
    id: uuid.UUID
    status: str
    requested_by: str
    priority: int
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    failure_reason: str | None


class SessionArtifact(_Body):
    id: uuid.UUID
    filename: str
    sha256: str
    bytes: int
    status: str
    format_detected: str | None


class Session(_Body):
    id: uuid.UUID
    tenant: str
    device: str
    status: str
    query_ready: bool
    active_run_id: uuid.UUID | None
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    runs: list[SessionRun]
    artifacts: list[SessionArtifact]


class TrackPoint(_Body):
    t: datetime
    lat: float
    lon: float
    speed_mps: float | None


class SessionTrack(_Body):
    """The active run's downsampled GNSS series, thinned for drawing."""

    session_id: uuid.UUID
    run_id: uuid.UUID | None
    dataset: str | None = Field(description="`gnss_L1`, or `gnss_L2` when L1 is absent.")
    rows: int = Field(description="Rows in the dataset, before thinning.")
    points: list[TrackPoint]
    reason: str | None = Field(
        description="Why there are no points: `NO_ACTIVE_RUN` or `NO_GNSS_SERIES`."
    )


class SectorTime(_Body):
    """One sector (between two timing lines) or mini-sector of one lap."""

    sector: int
    time_s: float
    sigma_s: float | None = Field(
        description="Standard uncertainty of the time (null for mini-sectors)."
    )
    delta_to_best_s: float | None = Field(description="Against the best valid lap's sector.")
    is_best: bool
    start_m: float | None = Field(
        None, description="Where it starts along the reference lap's path (m)."
    )
    end_m: float | None = None


class LapRow(_Body):
    """One complete lap of the active run (spec 000 §11)."""

    lap: int
    start: datetime
    end: datetime
    lap_time_s: float
    distance_m: float | None = Field(description="Speed integrated between the two crossings.")
    max_speed_mps: float | None
    avg_speed_mps: float | None
    delta_to_best_s: float | None
    is_best: bool
    valid: bool
    pit: bool
    pit_in: bool
    pit_out: bool
    stopped_s: float
    lap_time_sigma_s: float | None = Field(
        None, description="Standard uncertainty of the lap time, from its two crossings."
    )
    rolling_best_s: float | None = Field(
        None, description="The best valid lap time up to and including this lap."
    )
    sectors: list[SectorTime] = Field(
        default_factory=list, description="The lap's sector times (none: not every line crossed)."
    )


class SessionLaps(_Body):
    """The active run's laps, one row each, and the start/finish line that timed them."""

    session_id: uuid.UUID
    run_id: uuid.UUID | None
    line: dict[str, Any] | None = Field(
        description="The start/finish line used: configured or detected, with its ends."
    )
    reason: str | None = Field(
        description="Why there are no laps (`NO_ACTIVE_RUN`, `TRACK_NOT_CLOSED`, ...)."
    )
    laps: list[LapRow]
    finish: dict[str, Any] | None = Field(
        None, description="A point-to-point stage's own finish line (null: a circuit)."
    )
    sector_lines: list[dict[str, Any]] = Field(
        default_factory=list, description="The sector lines, in driving order."
    )
    track: dict[str, Any] | None = Field(
        None, description="The saved or library track the lines came from, if any."
    )
    reference_lap: int | None = Field(
        None, description="The lap deltas and corners are measured against."
    )
    theoretical_best_s: float | None = Field(
        None, description="The sum of the best valid sector times."
    )
    theoretical_best_mini_s: float | None = Field(
        None, description="The sum of the best valid mini-sector times."
    )


class LapDeltaPoint(_Body):
    d_m: float = Field(description="Along the reference lap's path from its start line.")
    t_s: float = Field(description="Seconds since this lap's start crossing.")
    delta_s: float = Field(description="This lap's time minus the reference lap's, here.")
    speed_mps: float


class LapCorner(_Body):
    """One corner of the reference lap, as this lap drove it."""

    corner: int
    direction: str | None
    start_m: float
    end_m: float
    braking_m: float = Field(description="Where this lap's speed peaked before the apex.")
    apex_m: float = Field(description="Where this lap's speed was lowest in the corner.")
    entry_speed_mps: float
    apex_speed_mps: float
    exit_speed_mps: float
    time_delta_s: float = Field(
        description="Time lost (> 0) or gained (< 0) against the reference lap, braking "
        "point to corner exit."
    )


class LapAnalysis(_Body):
    """One lap against the reference lap: the delta channel, corners and mini-sectors."""

    session_id: uuid.UUID
    run_id: uuid.UUID
    lap: int
    lap_time_s: float
    reference_lap: int | None
    reference_lap_time_s: float | None
    delta: list[LapDeltaPoint]
    corners: list[LapCorner]
    mini_sectors: list[SectorTime]
    reason: str | None = Field(
        description="Why there is no delta: `NO_REFERENCE_LAP`, `NOT_ANALYSED` (a run "
        "processed before lap analysis existed: reprocess it)."
    )


class LapTracePoint(_Body):
    t_s: float = Field(description="Seconds since the lap's start crossing.")
    d_m: float = Field(description="Distance driven since the start crossing (speed integrated).")
    speed_mps: float


class LapSegment(_Body):
    """A corner, straight or jump of the lap, placed by distance into the lap."""

    segment_id: int
    kind: str = Field(description="`corner`, `straight` or `jump`.")
    direction: str | None = Field(description="`left` / `right` for a corner.")
    start_m: float | None
    apex_m: float | None = Field(description="A corner's point of tightest curvature.")
    end_m: float | None
    heading_change_deg: float | None


class LapTrace(_Body):
    """One lap of the active run as speed over distance, for overlaying laps."""

    session_id: uuid.UUID
    run_id: uuid.UUID
    lap: int
    lap_time_s: float
    dataset: str | None = Field(description="`gnss_L1`, or `gnss_L2` when L1 is absent.")
    points: list[LapTracePoint]
    segments: list[LapSegment] = Field(
        description="The lap's segments (detect_segments), by start; empty when none ran."
    )
    reason: str | None = Field(description="Why there are no points: `NO_GNSS_SERIES`.")


class ReceiptArtifact(_Body):
    name: str
    sha256: str
    size: int


class ReceiptLinks(_Body):
    session: str
    run: str | None


class UploadReceipt(_Body):
    """What ``POST /v1/sessions`` stored and published (intake makes the run)."""

    tenant: str
    device: str
    session_id: uuid.UUID
    run_id: uuid.UUID | None = Field(description="Null when intake took longer than the wait.")
    artifact_set_hash: str
    artifacts: list[ReceiptArtifact]
    subject: str
    links: ReceiptLinks


class UploadForm(_Body):
    """The form fields of a multipart upload (files are parts with a filename)."""

    file: bytes = Field(json_schema_extra={"format": "binary"})
    device: str
    priority: int = Field(0, ge=-1000, le=1000)
    config: str | None = Field(
        None,
        description="A JSON object: the run's config, with the keys reprocess's `config` "
        "shows (a bad one is a 400 `INVALID_CONFIG`, the key named).",
    )
    title: str | None = Field(None, max_length=500)
    date: dt.date | None = Field(None, description="The day a dateless log was recorded.")


class ReprocessRequest(_Request):
    # Checked by the handler with every run config's check (INVALID_CONFIG, the key named, as
    # the upload's), and described as what that check accepts.
    config: Annotated[dict[str, Any], _DescribedAs(RunConfig)] | None = Field(
        None,
        description="The new run's config (refused as the upload's is: 400 `INVALID_CONFIG`, "
        "the key named). Default: the source run's config.",
    )
    priority: int | None = Field(None, ge=-1000, le=1000)


class RollbackRequest(_Request):
    to_run: uuid.UUID | None = Field(None, description="Default: the previous good run.")


class RollbackResult(_Body):
    session_id: uuid.UUID
    from_run: uuid.UUID
    to_run: uuid.UUID
