"""Devices and schemas of the caller's tenant: list, show, (de)activate, and try a payload.

The reads are the read side's (``streams.views.devices``, ``streams.views.device_schemas``) and
the writes the registry's (``streams.registry``), the ones ``tideway devices`` and
``tideway schema`` call; a device or schema is named by its id or name within the tenant, so
another tenant's names are simply not found.
"""

from __future__ import annotations

from aiohttp import web

from schemas.api import (
    DeviceChange,
    DevicePage,
    DeviceQuery,
    SchemaPage,
    SchemaQuery,
    SchemaTestReport,
    SchemaTestRequest,
    SchemaVersionQuery,
)
from stages.ingest.dry_run import evaluate_payload, sample_values
from streams import registry
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.api.pages import decode_cursor, page_of, text
from streams.errors import NotFoundError
from streams.views import device_schemas, devices

__all__ = [
    "activate_device",
    "deactivate_device",
    "get_device",
    "get_schema",
    "list_devices",
    "list_schemas",
    "test_schema",
]


async def list_devices(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, DeviceQuery)
    after = decode_cursor(q.cursor, text)
    async with context_of(request).pool.acquire() as conn:
        rows = await devices.list_devices(
            conn,
            caller.tenant,
            schema=q.schema_name,
            active=q.active,
            after=after[0] if after else None,
            limit=q.limit + 1,
        )
    items, next_ = page_of(request, rows, q.limit, lambda d: (d.external_id,))
    return reply(DevicePage(items=items, next=next_))


async def get_device(request: web.Request) -> web.Response:
    caller, name = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        found = await devices.show_device(conn, caller.tenant, name)
    return reply(found)


async def _set_active(request: web.Request, active: bool) -> web.Response:
    caller, name = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        found, changed = await registry.set_active(conn, caller.tenant, name, active)
    return reply(DeviceChange(device=found, changed=changed))


async def activate_device(request: web.Request) -> web.Response:
    return await _set_active(request, True)


async def deactivate_device(request: web.Request) -> web.Response:
    return await _set_active(request, False)


async def list_schemas(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, SchemaQuery)
    after = decode_cursor(q.cursor, text)
    async with context_of(request).pool.acquire() as conn:
        rows = await device_schemas.list_schemas(
            conn, caller.tenant, after=after[0] if after else None, limit=q.limit + 1
        )
    items, next_ = page_of(request, rows, q.limit, lambda s: (s.name,))
    return reply(SchemaPage(items=items, next=next_))


async def get_schema(request: web.Request) -> web.Response:
    caller, name = caller_of(request), path_text(request, "name")
    q = query_of(request, SchemaVersionQuery)
    async with context_of(request).pool.acquire() as conn:
        found = await device_schemas.show_schema(conn, caller.tenant, name, q.version)
    return reply(found)


async def test_schema(request: web.Request) -> web.Response:
    """Run a sample through validate, mutate and derive of a stored schema version."""
    caller, name = caller_of(request), path_text(request, "name")
    body = await body_of(request, SchemaTestRequest)
    async with context_of(request).pool.acquire() as conn:
        found = await device_schemas.show_schema(conn, caller.tenant, name, body.version)
    program = device_schemas.programs(found).get(body.topic)
    if program is None:
        raise NotFoundError(f"schema {name!r} v{found.version} has no topic {body.topic!r}")
    report = evaluate_payload(program, sample_values(body.payload))
    return reply(SchemaTestReport.model_validate(report))
