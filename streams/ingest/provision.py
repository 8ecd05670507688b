"""Provision the streaming half's NATS and ClickHouse resources, idempotently.

* ``TELEMETRY`` stream: every ``telemetry.<tenant>.<device>.<topic>`` subject, the duplicate
  window (``Nats-Msg-Id`` dedupe inside JetStream), age and size limits from settings.
* The durable pull consumer every ``tideway ingest`` process shares: explicit acks,
  ``ack_wait`` from settings and **no delivery limit** — Tideway itself turns a persistent
  failure into a recorded ``failed_terminal`` plus dead letter (see ``ack_policy``), so
  JetStream must never drop an envelope on its own.
* ``TELEMETRY_DLQ`` stream: a copy of every dead-lettered envelope, for alerting.
* The ClickHouse analytics table.

Running it again updates the streams to the current settings and leaves data in place.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from streams.config import Settings
from streams.ingest.analytics import Analytics
from streams.ingest.resources import nats_connect
from streams.names import Names

DLQ_MAX_AGE_S = 30 * 24 * 3600.0


def telemetry_stream(settings: Settings, names: Names) -> StreamConfig:
    """The TELEMETRY stream's configuration."""
    s = settings.stream
    return StreamConfig(
        name=names.telemetry_stream, subjects=[names.telemetry_subjects],
        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, discard=DiscardPolicy.OLD,
        max_age=s.max_age_s, max_bytes=s.max_bytes, duplicate_window=s.duplicate_window_s,
        num_replicas=s.replicas,
        max_msg_size=max(settings.consumer.max_payload_bytes * 4, 1024 * 1024),
        description="Telemetry envelopes from devices (tideway streams init)",
    )


def dead_letter_stream(settings: Settings, names: Names) -> StreamConfig:
    """The dead-letter stream's configuration."""
    return StreamConfig(
        name=names.dead_letter_stream, subjects=[names.dead_letter_subjects],
        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, discard=DiscardPolicy.OLD,
        max_age=DLQ_MAX_AGE_S, duplicate_window=120.0, num_replicas=settings.stream.replicas,
        description="Copies of dead-lettered telemetry envelopes (tideway dlq)",
    )


def ingest_consumer(settings: Settings, names: Names) -> ConsumerConfig:
    """The shared durable pull consumer's configuration."""
    c = settings.consumer
    return ConsumerConfig(
        durable_name=names.ingest_durable, ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL, ack_wait=c.ack_wait_s, max_deliver=-1,
        max_ack_pending=c.max_ack_pending, max_waiting=512,
        description="tideway ingest (shared by every consumer process)",
    )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        return
    await js.update_stream(config)


async def provision_nats(js: JetStreamContext, settings: Settings) -> None:
    """Create or update the streams and the shared consumer."""
    names = Names(namespace=settings.namespace)
    await _ensure_stream(js, telemetry_stream(settings, names))
    await _ensure_stream(js, dead_letter_stream(settings, names))
    await js.add_consumer(names.telemetry_stream, ingest_consumer(settings, names))


async def provision(settings: Settings) -> None:
    """Idempotently provision the TELEMETRY stream, the shared consumer, the DLQ stream and
    the ClickHouse analytics table (``tideway streams init``; ``tideway up`` runs it too)."""
    from streams.clickhouse import ClickHouse

    nc = await nats_connect(settings.nats(), name="tideway-provision")
    try:
        await provision_nats(nc.jetstream(), settings)
    finally:
        await nc.close()
    names = Names(namespace=settings.namespace)
    clickhouse = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
    await Analytics(clickhouse, names.analytics_table).ensure()
