"""Tenants and devices as the batch half needs them: resolved by name, created on first use.

A session upload names its tenant and device the way a device names them on NATS subjects
(``sessions.<tenant>.<device>``). The first upload for a new tenant or device registers it, so
``tideway sessions upload FILE --device D`` works on a fresh install; the registry's own
commands manage schemas and activation later. Creation is an upsert
after a read finds nothing, and concurrent intakes agree on one row.
"""

from __future__ import annotations

import uuid
from typing import Any

from streams.identity.ids import check_device, check_tenant

__all__ = ["check_device", "check_tenant", "ensure_device", "ensure_tenant", "tenant_id"]

# ``DO UPDATE`` (a no-op write) rather than ``DO NOTHING`` so RETURNING always yields the id,
# even when a concurrent transaction inserted the row after this statement's snapshot.
_INSERT_TENANT = """
INSERT INTO tenants (name) VALUES ($1)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id
"""

_INSERT_DEVICE = """
INSERT INTO devices (tenant_id, external_id) VALUES ($1, $2)
ON CONFLICT (tenant_id, external_id) DO UPDATE SET external_id = EXCLUDED.external_id
RETURNING id
"""


async def ensure_tenant(conn: Any, name: str) -> uuid.UUID:
    """The id of tenant ``name``, creating the tenant when it does not exist."""
    found = await tenant_id(conn, check_tenant(name))
    if found is None:
        found = await conn.fetchval(_INSERT_TENANT, name)
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
        found = await conn.fetchval(_INSERT_DEVICE, tenant_id, external_id)
    assert found is not None
    return found


async def tenant_id(conn: Any, name: str) -> uuid.UUID | None:
    """The id of tenant ``name`` or ``None``."""
    found: uuid.UUID | None = await conn.fetchval("SELECT id FROM tenants WHERE name = $1", name)
    return found
