"""The device and schema registry in Postgres: apply schema files, manage devices.

Schema versions are immutable and content-addressed. Applying a schema file compiles it first
(a schema that cannot run is never stored), then, in one transaction holding the schema's row
lock: if a version with the same content hash exists, nothing is written and that version is
returned (``created=False``); otherwise the next version number is taken and the version, its
topics and its parameters are inserted. Concurrent applies of one schema therefore serialise on
the lock and agree on version numbers; the unique ``(schema_id, content_hash)`` constraint backs
that up.

Every function is scoped to one tenant, named as in subjects (``telemetry.<tenant>...``).
Writes create the tenant on first use; reads of an unknown tenant raise ``NotFoundError``.
The reads - lists and shows of devices and schemas - are the read side's
(:mod:`streams.views.devices`, :mod:`streams.views.device_schemas`); a write that answers a
device answers the API's :class:`~schemas.api.Device`, read in the one shape
:data:`DEVICE_COLUMNS` both use.

Tenants and devices are resolved by name and created on first use (:func:`ensure_tenant`,
:func:`ensure_device`): a session upload names its tenant and device the way a device names
them on NATS subjects (``sessions.<tenant>.<device>``), and the first upload for a new tenant
or device registers it, so ``tideway sessions upload FILE --device D`` works on a fresh
install. Creation is an upsert after a read finds nothing, and concurrent callers agree on one
row. Both halves - the streaming consumer and the session intake - resolve them here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from schemas.api import Device
from schemas.device_schema import SchemaFile
from stages.ingest.program import compile_schema
from streams.errors import NotFoundError, UsageError
from streams.identity.ids import check_device, check_tenant

# --- statements -------------------------------------------------------------------------------

# ``DO UPDATE`` (a no-op write) rather than ``DO NOTHING`` so RETURNING always yields the id,
# even when a concurrent transaction inserted the row after this statement's snapshot.
_ENSURE_TENANT = """
INSERT INTO tenants (name) VALUES ($1)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id
"""

_ENSURE_DEVICE = """
INSERT INTO devices (tenant_id, external_id) VALUES ($1, $2)
ON CONFLICT (tenant_id, external_id) DO UPDATE SET external_id = EXCLUDED.external_id
RETURNING id
"""


async def ensure_tenant(conn: Any, name: str) -> uuid.UUID:
    """The id of tenant ``name``, creating the tenant when it does not exist."""
    found = await tenant_id(conn, check_tenant(name))
    if found is None:
        found = await conn.fetchval(_ENSURE_TENANT, name)
    assert found is not None
    return found


async def ensure_device(conn: Any, tenant_id: uuid.UUID, external_id: str) -> uuid.UUID:
    """The id of device ``external_id`` of the tenant, registering it on first use."""
    found: uuid.UUID | None = await conn.fetchval(
        "SELECT id FROM devices WHERE tenant_id = $1 AND external_id = $2",
        tenant_id,
        check_device(external_id),
    )
    if found is None:
        found = await conn.fetchval(_ENSURE_DEVICE, tenant_id, external_id)
    assert found is not None
    return found


async def tenant_id(conn: Any, name: str) -> uuid.UUID | None:
    """The id of tenant ``name`` or ``None``."""
    found: uuid.UUID | None = await conn.fetchval("SELECT id FROM tenants WHERE name = $1", name)
    return found


async def require_tenant_id(conn: Any, name: str) -> uuid.UUID:
    """The id of tenant ``name`` (``NotFoundError`` when there is no such tenant)."""
    found = await tenant_id(conn, name)
    if found is None:
        raise NotFoundError(f"no tenant {name}")
    return found


_UPSERT_SCHEMA = """
INSERT INTO device_schemas (tenant_id, name) VALUES ($1, $2)
ON CONFLICT (tenant_id, name) DO UPDATE SET name = EXCLUDED.name
RETURNING id
"""  # DO UPDATE locks the row until commit: concurrent applies of one schema serialise here.

_VERSION_BY_HASH = """
SELECT id, version, created_at FROM device_schema_versions
WHERE schema_id = $1 AND content_hash = $2
"""

_LATEST_VERSION = "SELECT max(version) FROM device_schema_versions WHERE schema_id = $1"

_INSERT_VERSION = """
INSERT INTO device_schema_versions (schema_id, version, content_hash, source_text, spec)
VALUES ($1, $2, $3, $4, $5) RETURNING id, created_at
"""

_INSERT_TOPIC = "INSERT INTO schema_topics (schema_version_id, name) VALUES ($1, $2) RETURNING id"

_INSERT_PARAMETER = """
INSERT INTO schema_parameters (topic_id, name, position, type, unit, source, required, critical,
                               min_value, max_value, mutate, derived)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
"""

_VERSION_ID = """
SELECT v.id FROM device_schemas s JOIN device_schema_versions v ON v.schema_id = s.id
WHERE s.tenant_id = $1 AND s.name = $2 AND v.version = coalesce($3, (
    SELECT max(version) FROM device_schema_versions WHERE schema_id = s.id))
"""

DEVICE_COLUMNS = """
SELECT d.id, t.name AS tenant, d.external_id, d.name, d.active, s.name AS schema,
       v.version AS schema_version, d.schema_version_id, d.created_at, d.updated_at
FROM devices d JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN device_schema_versions v ON v.id = d.schema_version_id
LEFT JOIN device_schemas s ON s.id = v.schema_id
"""  # a device record as schemas.api.Device declares it (streams.views.devices lists by it)

_DEVICE = DEVICE_COLUMNS + "WHERE d.tenant_id = $1 AND d.external_id = $2"

_INSERT_DEVICE = """
INSERT INTO devices (tenant_id, external_id, name, active, schema_version_id)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_id, external_id) DO NOTHING RETURNING id
"""

_SET_ACTIVE = """
UPDATE devices SET active = $3, updated_at = now()
WHERE tenant_id = $1 AND external_id = $2 AND active IS DISTINCT FROM $3 RETURNING id
"""

_ASSIGN = """
UPDATE devices SET schema_version_id = $3, updated_at = now()
WHERE tenant_id = $1 AND external_id = $2 RETURNING id
"""

# --- value objects ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AppliedSchema:
    """The outcome of applying a schema file; ``created`` is False for identical content."""

    tenant: str
    schema: str
    version: int
    version_id: uuid.UUID
    content_hash: str
    created: bool
    latest_version: int
    """The newest version after this apply (differs from ``version`` when older content was
    applied again)."""
    topics: tuple[str, ...]


# --- schemas ----------------------------------------------------------------------------------


async def apply_schema(conn: Any, schema: SchemaFile, *, source_text: str,
                       filename: str = "<schema>") -> AppliedSchema:
    """Store ``schema`` as a new version, or find the version with identical content.

    Raises :class:`stages.ingest.program.SchemaCompileError` (naming ``filename``) before
    writing anything when the schema does not compile.
    """
    compile_schema(schema, filename=filename)
    content_hash = schema.content_hash()
    async with conn.transaction():
        tenant = await ensure_tenant(conn, schema.tenant)
        schema_id = await conn.fetchval(_UPSERT_SCHEMA, tenant, schema.name)
        latest = await conn.fetchval(_LATEST_VERSION, schema_id) or 0
        found = await conn.fetchrow(_VERSION_BY_HASH, schema_id, content_hash)
        if found is not None:
            version, version_id, created = found["version"], found["id"], False
        else:
            version, created = latest + 1, True
            row = await conn.fetchrow(_INSERT_VERSION, schema_id, version, content_hash,
                                      source_text, schema.canonical())
            version_id = row["id"]
            await _insert_topics(conn, version_id, schema)
    return AppliedSchema(
        tenant=schema.tenant, schema=schema.name, version=version, version_id=version_id,
        content_hash=content_hash, created=created, latest_version=max(latest, version),
        topics=tuple(t.name for t in schema.topics),
    )


async def _insert_topics(conn: Any, version_id: uuid.UUID, schema: SchemaFile) -> None:
    for topic in schema.topics:
        topic_id = await conn.fetchval(_INSERT_TOPIC, version_id, topic.name)
        await conn.executemany(_INSERT_PARAMETER, [
            (topic_id, p.name, position, p.type, p.unit, p.source, p.required, p.critical,
             p.min, p.max, p.mutate, p.derived)
            for position, p in enumerate(topic.parameters)
        ])


async def schema_version_id(conn: Any, tenant: str, name: str,
                            version: int | None = None) -> uuid.UUID:
    """The id of version ``version`` (default: the newest) of schema ``name``."""
    found: uuid.UUID | None = await conn.fetchval(
        _VERSION_ID, await known_tenant(conn, tenant), name, version)
    if found is None:
        what = f"schema {name!r}" + (f" version {version}" if version is not None else "")
        raise NotFoundError(f"{what} not found for tenant {tenant!r}")
    return found


# --- devices ----------------------------------------------------------------------------------


async def add_device(conn: Any, tenant: str, external_id: str, *, name: str | None = None,
                     schema: str | None = None, version: int | None = None,
                     active: bool = True) -> Device:
    """Register a new device (``UsageError`` if it exists), optionally assigning a schema."""
    check_device(external_id)
    async with conn.transaction():
        tenant_uuid = await ensure_tenant(conn, tenant)
        version_id = None
        if schema is not None:
            version_id = await schema_version_id(conn, tenant, schema, version)
        elif version is not None:
            raise UsageError("--version needs --schema")
        inserted = await conn.fetchval(_INSERT_DEVICE, tenant_uuid, external_id, name, active,
                                       version_id)
        if inserted is None:
            raise UsageError(f"device {external_id!r} already exists for tenant {tenant!r}",
                             code="DEVICE_EXISTS")
    return await device(conn, tenant, external_id)


async def device(conn: Any, tenant: str, external_id: str) -> Device:
    """One device as the registry's writes answer it (``NotFoundError`` if ``tenant`` has no
    such device); :func:`streams.views.devices.show_device` is the read side's name for it."""
    row = await conn.fetchrow(_DEVICE, await known_tenant(conn, tenant), external_id)
    if row is None:
        raise NotFoundError(f"device {external_id!r} not found for tenant {tenant!r}")
    return Device.model_validate(dict(row))


async def set_active(conn: Any, tenant: str, external_id: str, active: bool
                     ) -> tuple[Device, bool]:
    """Activate or deactivate a device; the flag says whether anything changed."""
    changed = await conn.fetchval(_SET_ACTIVE, await known_tenant(conn, tenant), external_id,
                                  active)
    return await device(conn, tenant, external_id), changed is not None


async def assign_schema(conn: Any, tenant: str, external_id: str, schema: str,
                        version: int | None = None) -> Device:
    """Assign version ``version`` (default: the newest) of ``schema`` to a device."""
    target = await schema_version_id(conn, tenant, schema, version)
    updated = await conn.fetchval(_ASSIGN, await known_tenant(conn, tenant), external_id, target)
    if updated is None:
        raise NotFoundError(f"device {external_id!r} not found for tenant {tenant!r}")
    return await device(conn, tenant, external_id)


async def known_tenant(conn: Any, name: str) -> uuid.UUID:
    """The id of tenant ``name`` (``NotFoundError`` if there is none: reads create nothing)."""
    found = await tenant_id(conn, check_tenant(name))
    if found is None:
        raise NotFoundError(f"tenant {name!r} not found")
    return found
