"""The domain-event outbox (spec 003, "transactional outbox"; migration ``0025``).

Triggers on ``processing_runs`` and ``sessions`` write one row per change they announce, in
the changing transaction; the relay (``streams.domain_events.relay``) publishes the rows in
``id`` order to the EVENTS stream and stamps ``relayed_at``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from schemas.tables.base import metadata

_TS = sa.DateTime(timezone=True)

event_outbox = sa.Table(
    "event_outbox",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("tenant_id", UUID(as_uuid=True), nullable=False),
    # ``run.<status>`` or ``session.published``.
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("run_id", UUID(as_uuid=True)),
    sa.Column("session_id", UUID(as_uuid=True)),
    # The event's own fields: ``status`` of a run event, ``previous_run_id`` of a pointer's.
    sa.Column("fields", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("created_at", _TS, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("relayed_at", _TS),
    sa.Index("ix_event_outbox_unrelayed", "id", postgresql_where=sa.text("relayed_at IS NULL")),
)
