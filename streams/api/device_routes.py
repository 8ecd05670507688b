"""Devices of the caller's tenant: list, show, activity, series, (de)activate.

The reads are the read side's (``streams.views.devices``, ``streams.views.fleet``) and the
writes the registry's (``streams.registry``), the ones ``tideway devices`` calls; a device is
named by its id within the tenant, so another tenant's devices are simply not found.

``GET /v1/devices/{device}/activity``: the device's hot state from Redis and its newest
envelopes with their status. ``GET /v1/devices/{device}/series``: its numeric parameters over a
recent window from ClickHouse, in buckets whose times carry their UTC offset, the boolean ones
(by the device's schema) marked as shares of true readings.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

from aiohttp import web

from schemas.api import (
    Device,
    DeviceActivity,
    DeviceChange,
    DevicePage,
    DeviceQuery,
    DeviceSeries,
    DeviceSeriesQuery,
    SchemaTrialReport,
    SchemaTrialRequest,
)
from streams import registry
from streams.adapters.redis import redis_client
from streams.api import path_params as pp
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, page_of, text
from streams.clickhouse import ClickHouse
from streams.errors import NotFoundError
from streams.ingest import schema_trial
from streams.ingest.hot_state import HotState
from streams.names import Names
from streams.views import device_schemas, devices
from streams.views.fleet import boolean_parameters, device_activity, device_series

__all__ = [
    "DEVICE",
    "NO_DEVICE",
    "ROUTES",
    "activate_device",
    "deactivate_device",
    "get_device",
    "get_device_activity",
    "get_device_series",
    "list_devices",
    "try_schema",
]

DEVICE: Final = {"device": pp.DEVICE}
"""The parameters of a path naming one device (their kinds: schema and check)."""
NO_DEVICE: Final = "no such device"
"""The one text of the 404 of a path naming one device."""


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


async def get_device_activity(request: web.Request) -> web.Response:
    ctx, caller, name = context_of(request), caller_of(request), path_text(request, "device")
    # Redis is read per request, as redrive does: the API process keeps no Redis connection.
    async with ctx.pool.acquire() as conn:
        await devices.show_device(conn, caller.tenant, name)  # 404 for another tenant's
        redis = redis_client(ctx.settings.redis())
        try:
            key = Names(namespace=ctx.settings.namespace).hot_state_key(caller.tenant, name)
            state = await HotState(redis).read(key)
        finally:
            await redis.aclose()
        activity = await device_activity(conn, caller.tenant_id, name, state)
    return reply(activity)


async def get_device_series(request: web.Request) -> web.Response:
    ctx, caller, name = context_of(request), caller_of(request), path_text(request, "device")
    q = query_of(request, DeviceSeriesQuery)
    async with ctx.pool.acquire() as conn:
        found = await devices.show_device(conn, caller.tenant, name)  # 404 for another tenant's
        booleans = await boolean_parameters(conn, found.schema_version_id)
    now, window = dt.datetime.now(dt.UTC), dt.timedelta(minutes=q.window_minutes)
    # Made per request, as Redis above: the client underneath is shared per DSN.
    clickhouse = (
        None
        if ctx.settings.clickhouse_dsn is None
        else ClickHouse(ctx.settings.clickhouse(), ctx.settings.clickhouse_database)
    )
    table = Names(namespace=ctx.settings.namespace).analytics_table
    series = await device_series(
        clickhouse, table, tenant=caller.tenant, device=name, now=now, window=window,
        booleans=booleans,
    )  # fmt: skip
    return reply(series)


async def _set_active(request: web.Request, active: bool) -> web.Response:
    caller, name = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        found, changed = await registry.set_active(conn, caller.tenant, name, active)
    return reply(DeviceChange(device=found, changed=changed))


async def activate_device(request: web.Request) -> web.Response:
    return await _set_active(request, True)


async def deactivate_device(request: web.Request) -> web.Response:
    return await _set_active(request, False)


async def try_schema(request: web.Request) -> web.Response:
    """A stored schema version tried on the device's recorded envelopes (writes nothing)."""
    caller, device = caller_of(request), path_text(request, "device")
    body = await body_of(request, SchemaTrialRequest)
    ctx = context_of(request)
    settings, names = ctx.settings, Names(namespace=ctx.settings.namespace)
    async with ctx.pool.acquire() as conn:
        found = await device_schemas.show_schema(conn, caller.tenant, body.schema_name,
                                                 body.version)
        programs = device_schemas.programs(found)
        if body.topic is not None and body.topic not in programs:
            raise NotFoundError(f"schema {found.name!r} v{found.version} has no topic "
                                f"{body.topic!r}")
        scope = await schema_trial.scope_of(conn, names, tenant=caller.tenant,
                                            programs=programs, device=device, topic=body.topic)
        report = await schema_trial.trial(
            ctx.nats, conn, names, scope, schema=found.name, content_hash=found.content_hash,
            last=body.last or settings.schemas.trial_last, since=body.since,
            max_payload_bytes=settings.consumer.max_payload_bytes,
            max_refused_share=settings.schemas.trial_max_refused_share)
    return reply(SchemaTrialReport.model_validate({**report.as_dict(),
                                                   "version": found.version}))


_TAG = "devices"

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/devices", handler=list_devices, tag=_TAG,
          summary="The caller's devices by id", query=DeviceQuery, response=DevicePage),
    Route(method="GET", path="/v1/devices/{device}", handler=get_device, tag=_TAG,
          summary="One device", response=Device, path_types=DEVICE, not_found=NO_DEVICE),
    Route(method="GET", path="/v1/devices/{device}/activity", handler=get_device_activity,
          tag=_TAG, summary="The device's hot state and its newest envelopes",
          response=DeviceActivity, path_types=DEVICE, not_found=NO_DEVICE),
    Route(method="GET", path="/v1/devices/{device}/series", handler=get_device_series,
          tag=_TAG, summary="The device's numeric parameters over a recent window, bounded "
                            "for charts (ClickHouse)", query=DeviceSeriesQuery,
          response=DeviceSeries, path_types=DEVICE, not_found=NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/activate", handler=activate_device,
          tag=_TAG, summary="Process and publish the device's envelopes",
          response=DeviceChange, path_types=DEVICE, not_found=NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/deactivate", handler=deactivate_device,
          tag=_TAG, summary="Record the device's envelopes, skip mutate/derive/publish",
          response=DeviceChange, path_types=DEVICE, not_found=NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/schema-trial", handler=try_schema,
          tag=_TAG, summary="Try a stored schema version on the device's recorded envelopes "
                            "beside what was recorded (writes nothing)",
          body=SchemaTrialRequest, response=SchemaTrialReport, path_types=DEVICE,
          not_found="no such device, schema, version or topic"),
)  # fmt: skip
