"""Where a client's domain-event stream (``GET /v1/events``) starts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EventStreamQuery(BaseModel):
    """Where ``GET /v1/events`` starts (the ``Last-Event-ID`` header wins over it)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    last_event_id: int | None = Field(
        None, ge=0, le=2**63 - 1,
        description="Resume after this event (its SSE `id`): every later event the stream "
        "holds comes first, in order. For clients that cannot send the `Last-Event-ID` header.",
    )
