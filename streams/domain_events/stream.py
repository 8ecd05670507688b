"""The EVENTS stream and the JSON body of one event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from streams.adapters.nats import JetStreamContext, ensure_stream
from streams.config import Settings
from streams.names import Names

__all__ = ["CHANNEL", "DUPLICATE_WINDOW_S", "ensure_events_stream", "event_body",
           "events_stream_config", "message_id"]

CHANNEL: Final = "tideway_events"
"""The Postgres channel the outbox triggers notify (migration 0025), one per database."""

DUPLICATE_WINDOW_S: Final = 600.0
"""How long JetStream remembers an event's ``Nats-Msg-Id``: a relay that published an event,
then died or lost Postgres before stamping it, sends it again well within this."""


def events_stream_config(settings: Settings, names: Names) -> StreamConfig:
    """The EVENTS stream: every tenant's events, kept ``events.max_age_s``."""
    return StreamConfig(
        name=names.events_stream,
        subjects=[names.events_subjects],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=settings.events.max_age_s,
        duplicate_window=DUPLICATE_WINDOW_S,
        num_replicas=settings.stream.replicas,
        description="Domain events relayed from the Postgres outbox (streams.domain_events)",
    )


async def ensure_events_stream(js: JetStreamContext, settings: Settings) -> None:
    """Create or update the EVENTS stream (the relay and the API both do, at start)."""
    await ensure_stream(js, events_stream_config(settings, Names(namespace=settings.namespace)))


def message_id(names: Names, event_id: int) -> str:
    """The ``Nats-Msg-Id`` of outbox event ``event_id`` (namespaced: two deployments on one
    server never share one)."""
    return f"{names.namespace}:event:{event_id}"


def event_body(row: Mapping[str, Any] | Any) -> bytes:
    """The JSON body of one outbox row (with its tenant's name as ``tenant``)."""
    body = {
        "id": row["id"],
        "type": row["kind"],
        "tenant": row["tenant"],
        "run_id": row["run_id"],
        "session_id": row["session_id"],
        **(row["fields"] or {}),
        "at": row["created_at"].isoformat(),
    }
    return orjson.dumps(body, default=str)
