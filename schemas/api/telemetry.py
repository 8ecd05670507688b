"""The console's fleet and device pages, and one envelope explained."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from schemas.api.base import Text, _Body

FleetSort = Literal[
    "device",
    "last_seen_at",
    "envelopes",
    "invalid_share",
    "duplicates",
    "out_of_order",
    "seq_gaps",
    "latency_p50_s",
    "clock_skew_s",
]


class FleetQuery(BaseModel):
    """The window, the sort and the search of the fleet's device table."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    window_minutes: int = Field(60, ge=1, le=1440, description="The recent window read.")
    sort: FleetSort = Field("last_seen_at", description="`clock_skew_s` sorts by its size.")
    order: Literal["asc", "desc"] = "desc"
    search: Text | None = Field(None, max_length=200, description="Part of the device id.")
    limit: int = Field(100, ge=1, le=1000, description="Devices answered (the first by sort).")


class DeviceQuality(_Body):
    """One device's data-quality figures over the window (see docs/api.md, Fleet)."""

    device: str
    last_seen_at: datetime
    envelopes: int = Field(description="Received, duplicates not counted.")
    invalid_share: float = Field(
        description="Share of envelopes that failed validation or were malformed (too large, "
        "not JSON, breaking the envelope contract)."
    )
    duplicates: int
    out_of_order: int = Field(description="Envelopes whose seq is below the one before them.")
    seq_gaps: int = Field(description="seq numbers in the window's range that never arrived.")
    latency_p50_s: float | None = Field(description="Median received - measured, seconds.")
    clock_skew_s: float | None = Field(description="Smallest received - measured, seconds.")


class FleetReport(_Body):
    """The fleet over a recent window: ingest by status, open dead letters, device figures."""

    at: datetime
    window_s: int
    statuses: dict[str, int] = Field(description="Envelopes received per status.")
    rate_per_min: float = Field(description="Envelopes received per minute, all statuses.")
    open_dead_letters: int
    matched: int = Field(description="Devices seen in the window that match the search.")
    devices: list[DeviceQuality] = Field(description="The first `limit` of them, sorted.")


class RecentMessage(_Body):
    id: int
    received_at: datetime
    measured_at: datetime | None
    seq: int | None
    topic: str = Field(description="The subject's last token.")
    status: str
    error_code: str | None


class ConsumerPending(_Body):
    stream: str
    durable: str
    pending: int = Field(description="Stored envelopes the consumer has not been given yet.")
    ack_pending: int = Field(description="Given to a consumer, not acknowledged yet.")


class FleetLive(_Body):
    """Ingest right now: end-to-end latency over the last minutes and the consumer's backlog."""

    at: datetime
    window_s: int
    envelopes: int = Field(
        description="The caller's envelopes the figures were read from: the window's newest, "
        "at most 10,000."
    )
    end_to_end_p50_s: float | None = Field(
        description="JetStream storing an envelope to its outcome being recorded (median)."
    )
    end_to_end_p95_s: float | None
    consumer: ConsumerPending | None = Field(
        description="The shared ingest consumer (all tenants); null when NATS cannot say."
    )


class DeviceActivity(_Body):
    """A device's hot state (Redis: the newest measurement per topic) and its newest envelopes."""

    device: str
    state: dict[str, Any] = Field(
        description="Per topic: `ts`, `seq`, `values`, `message_key`, `received_at`."
    )
    messages: list[RecentMessage] = Field(description="The newest 50, newest first.")


class SeriesPoint(_Body):
    """One time bucket of a charted parameter."""

    t: AwareDatetime = Field(
        description="Start of the time bucket, in UTC with its offset (`Z`): the bucket is "
        "`[t, t + step_s)`."
    )
    value: float = Field(
        description="The bucket's average value; for a `boolean` parameter the share of its "
        "readings that were true (0 to 1), not a reading."
    )


class ParameterSeries(_Body):
    parameter: str
    unit: str
    kind: Literal["number", "boolean"] = Field(
        "number",
        description="`boolean` when the device's schema declares the parameter boolean: its "
        "points are shares of true readings (booleans are stored as 1 and 0).",
    )
    points: list[SeriesPoint] = Field(description="Only buckets with readings, oldest first.")


class DeviceSeriesQuery(BaseModel):
    """How far back the device's charts reach."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    window_minutes: int = Field(60, ge=1, le=1440, description="How far back to chart.")


class DeviceSeries(_Body):
    """A device's numeric parameters over a recent window (ClickHouse), bounded for drawing.

    The buckets span the readings, not the whole window: from the bucket of the device's first
    reading in the window to ``until``, so a device that started sending a few minutes ago is
    charted over those minutes. A bucket without readings has no point: that is a gap."""

    device: str
    since: AwareDatetime = Field(description="The window's start (`until` - `window_minutes`).")
    until: AwareDatetime = Field(description="The window's end: when the API answered.")
    step_s: float = Field(
        description="The width of every bucket in seconds (1 s, 2 s, 5 s ... 1 h: a round "
        "step, at least the readings' span over 240)."
    )
    parameters: list[ParameterSeries] = Field(
        description="At most 24 parameters of at most 240 bucket averages each, by name."
    )
    reason: str | None = Field(
        None,
        description="Why there are no charts: `NO_CLICKHOUSE` (none configured for the API) "
        "or the ClickHouse error's code (`CLICKHOUSE_BUSY`, `CLICKHOUSE_UNAVAILABLE`...).",
    )


class MessageExplanation(_Body):
    """Everything Tideway knows about one envelope (``tideway messages show``)."""

    message: dict[str, Any]
    stages: list[dict[str, Any]]
    telemetry: dict[str, Any] | None
    duplicates: list[dict[str, Any]]
    dead_letter: dict[str, Any] | None
    published: dict[str, Any] | None = None
    corrections: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What `tideway replay --reprocess` replaced in the telemetry row, oldest "
        "first: when, by which reprocess, the schema version and values before and after.",
    )
    archive: dict[str, list[str]] | None = Field(
        None,
        description="Set when retention had dropped rows of the envelope and they were read "
        "from the Parquet archives instead: per table, the archive objects read.",
    )
