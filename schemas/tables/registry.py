"""Tenants, API keys, devices and device schemas.

A device schema has immutable, content-addressed versions; each version has topics and each
topic has parameters. A device is assigned one schema version (or none yet) and is either
active or inactive. Versions are never updated after insert: applying new content makes a new
version, applying identical content finds the existing one by ``content_hash``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from schemas.tables.base import created_at, metadata, tenant_fk, updated_at, uuid_pk

tenants = sa.Table(
    "tenants",
    metadata,
    uuid_pk(),
    sa.Column("name", sa.Text, nullable=False, unique=True),
    created_at(),
    # The tenant's own limits (spec 000 §12); NULL: the ``quotas`` settings' default.
    sa.Column("max_active_runs", sa.Integer),
    sa.Column("max_priority", sa.Integer),
    sa.Column("daily_artifacts_quota", sa.Integer),
    sa.Column("daily_bytes_quota", sa.BigInteger),
    sa.CheckConstraint("name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'", name="name_format"),
    sa.CheckConstraint(
        "coalesce(max_active_runs, 1) >= 1 AND coalesce(daily_artifacts_quota, 0) >= 0"
        " AND coalesce(daily_bytes_quota, 0) >= 0",
        name="limits_positive",
    ),
)

# What each tenant uploaded per UTC day, reserved by an upload before its files are stored
# (``streams.sessions.quotas``).
tenant_daily_usage = sa.Table(
    "tenant_daily_usage",
    metadata,
    sa.Column(
        "tenant_id",
        pg.UUID(as_uuid=True),
        sa.ForeignKey("tenants.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("artifacts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("bytes", sa.BigInteger, nullable=False, server_default="0"),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    uuid_pk(),
    tenant_fk(),
    sa.Column("name", sa.Text, nullable=False),
    # sha256 of the secret; the secret itself is shown once at creation and never stored.
    sa.Column("key_hash", sa.Text, nullable=False, unique=True),
    sa.Column("prefix", sa.Text, nullable=False),
    created_at(),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
)

device_schemas = sa.Table(
    "device_schemas",
    metadata,
    uuid_pk(),
    tenant_fk(),
    sa.Column("name", sa.Text, nullable=False),
    created_at(),
    sa.UniqueConstraint("tenant_id", "name", name="uq_device_schemas_tenant_name"),
)

device_schema_versions = sa.Table(
    "device_schema_versions",
    metadata,
    uuid_pk(),
    sa.Column(
        "schema_id",
        pg.UUID(as_uuid=True),
        sa.ForeignKey("device_schemas.id", ondelete="RESTRICT"),
        nullable=False,
    ),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("content_hash", sa.Text, nullable=False),
    sa.Column("source_text", sa.Text, nullable=False),
    sa.Column("spec", pg.JSONB, nullable=False),
    created_at(),
    sa.UniqueConstraint("schema_id", "version", name="uq_device_schema_versions_version"),
    sa.UniqueConstraint("schema_id", "content_hash", name="uq_device_schema_versions_hash"),
    sa.CheckConstraint("version >= 1", name="version_positive"),
)

schema_topics = sa.Table(
    "schema_topics",
    metadata,
    uuid_pk(),
    sa.Column(
        "schema_version_id",
        pg.UUID(as_uuid=True),
        sa.ForeignKey("device_schema_versions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("name", sa.Text, nullable=False),
    sa.UniqueConstraint("schema_version_id", "name", name="uq_schema_topics_version_name"),
)

schema_parameters = sa.Table(
    "schema_parameters",
    metadata,
    uuid_pk(),
    sa.Column(
        "topic_id",
        pg.UUID(as_uuid=True),
        sa.ForeignKey("schema_topics.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("unit", sa.Text),
    sa.Column("source", sa.Text),
    sa.Column("required", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("critical", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("min_value", sa.Float),
    sa.Column("max_value", sa.Float),
    sa.Column("mutate", sa.Text),
    sa.Column("derived", sa.Text),
    sa.UniqueConstraint("topic_id", "name", name="uq_schema_parameters_topic_name"),
    sa.CheckConstraint(
        "type IN ('number', 'integer', 'boolean', 'string')", name="type_known"
    ),
)

devices = sa.Table(
    "devices",
    metadata,
    uuid_pk(),
    tenant_fk(),
    # The id a device uses in its subjects (telemetry.<tenant>.<external_id>.<topic>).
    sa.Column("external_id", sa.Text, nullable=False),
    sa.Column("name", sa.Text),
    sa.Column("active", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column(
        "schema_version_id",
        pg.UUID(as_uuid=True),
        sa.ForeignKey("device_schema_versions.id", ondelete="RESTRICT"),
    ),
    created_at(),
    updated_at(),
    sa.UniqueConstraint("tenant_id", "external_id", name="uq_devices_tenant_external_id"),
    sa.CheckConstraint("external_id ~ '^[A-Za-z0-9_-]{1,128}$'", name="external_id_format"),
)


device_credentials = sa.Table(
    # The secrets devices connect to NATS/MQTT with, as hashes (migration 0021, issue 25;
    # streams.identity.credentials). A credential is valid while revoked_at is NULL and its
    # device exists and is active; triggers announce every change that ends one.
    "device_credentials",
    metadata,
    uuid_pk(),
    sa.Column("tenant_id", pg.UUID(as_uuid=True), sa.ForeignKey("tenants.id"), nullable=False),
    sa.Column("device_id", pg.UUID(as_uuid=True),
              sa.ForeignKey("devices.id", ondelete="CASCADE"), nullable=False),
    # The secret's public part (in its text): a lookup is one unique-index probe.
    sa.Column("key_id", sa.Text, nullable=False),
    # SHA-256 of the whole secret (256 random bits: nothing to guess, a fast hash suffices).
    sa.Column("secret_hash", sa.LargeBinary, nullable=False),
    created_at(),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
    sa.Column("revoked_reason", sa.Text),
    sa.UniqueConstraint("key_id", name="uq_device_credentials_key_id"),
    sa.CheckConstraint("key_id ~ '^[a-z2-7]{16}$'", name="key_id_format"),
    sa.CheckConstraint("length(secret_hash) = 32", name="secret_hash_length"),
    sa.CheckConstraint("revoked_reason IN ('revoked', 'rotated')", name="revoked_reason_known"),
    sa.CheckConstraint("(revoked_at IS NULL) = (revoked_reason IS NULL)",
                       name="revoked_with_reason"),
    sa.Index("ix_device_credentials_device", "device_id", "created_at"),
)
