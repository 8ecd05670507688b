"""A tenant's devices as the API's :class:`~schemas.api.Device` (``tideway devices list|show``,
``GET /v1/devices``, ``GET /v1/devices/{device}``).

A device is read in the one shape the registry's writes answer too
(:data:`streams.registry.DEVICE_COLUMNS`): ``show_device`` is the registry's
:func:`~streams.registry.device`, so a device looks the same after ``add`` as after ``show``.
The operator-only fields (``id``, ``tenant``, ``schema_version_id``) are the CLI's.
"""

from __future__ import annotations

from schemas.api import Device
from streams.adapters.postgres import Conn
from streams.registry import DEVICE_COLUMNS, known_tenant
from streams.registry import device as show_device

__all__ = ["list_devices", "show_device"]

_LIST_DEVICES = DEVICE_COLUMNS + """
WHERE d.tenant_id = $1 AND ($2::text IS NULL OR s.name = $2) AND ($3::bool IS NULL OR d.active = $3)
  AND ($4::text IS NULL OR d.external_id > $4)
ORDER BY d.external_id
LIMIT $5
"""  # $4: the last id of the previous page (keyset paging); $5 NULL: no limit


async def list_devices(conn: Conn, tenant: str, *, schema: str | None = None,
                       active: bool | None = None, after: str | None = None,
                       limit: int | None = None) -> list[Device]:
    """Devices of ``tenant`` by id, optionally only those on ``schema`` or in one activation
    state (``limit`` of them with ids after ``after`` when given)."""
    rows = await conn.fetch(_LIST_DEVICES, await known_tenant(conn, tenant), schema, active,
                            after, limit)
    return [Device.model_validate(dict(row)) for row in rows]
