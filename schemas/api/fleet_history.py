"""The fleet page's charts: ingest by status and end-to-end latency over a chosen range
(``GET /v1/fleet/history``)."""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.api.base import _Body

FleetRange = Literal["15m", "1h", "6h", "24h"]

RANGE_SECONDS: Final[dict[str, int]] = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}
"""Each range's length; every range is cut into :data:`BUCKETS` buckets."""

BUCKETS: Final = 60


class FleetHistoryQuery(BaseModel):
    """How far back the fleet's charts reach."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    range: FleetRange = Field("1h", description="The time range charted, back from now.")


class FleetBucket(_Body):
    """One time bucket of the range: what arrived in it and how long it took."""

    t: datetime = Field(description="Start of the bucket (UTC, with its offset).")
    statuses: dict[str, int] = Field(description="Envelopes received in the bucket per status.")
    sampled: int = Field(
        description="Envelopes the latency was read from: the bucket's newest, at most 200."
    )
    end_to_end_p50_s: float | None = Field(
        description="JetStream storing an envelope to its outcome being recorded (median); "
        "null when the bucket has none."
    )
    end_to_end_p99_s: float | None


class FleetHistory(_Body):
    """The caller's ingest over ``range``, in equal buckets, oldest first (empty ones too)."""

    at: datetime
    range: FleetRange
    since: datetime = Field(description="Start of the first bucket.")
    until: datetime = Field(description="End of the last bucket (at or after `at`).")
    bucket_s: int
    buckets: list[FleetBucket]
