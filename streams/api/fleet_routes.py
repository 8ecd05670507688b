"""The console's fleet and device pages: the HTTP side of :mod:`streams.views.fleet`.

``GET /v1/fleet``: ingest by status, open dead letters, and each device's data-quality figures
over a recent window. ``GET /v1/devices/{device}/activity``: one device's hot state from Redis
and its newest envelopes with their status. ``GET /v1/devices/{device}/series``: its numeric
parameters over a recent window from ClickHouse. ``GET /v1/fleet/live``: end-to-end latency
over the last minutes and the ingest consumer's pending counts (one ``CONSUMER.INFO``, as the
metrics sampler asks).
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from schemas.api import ConsumerPending, DeviceSeriesQuery, FleetQuery
from streams.adapters.errors import NatsError
from streams.adapters.redis import redis_client
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.clickhouse import ClickHouse
from streams.ingest.hot_state import HotState
from streams.names import Names
from streams.views import devices
from streams.views.fleet import device_activity, device_series, fleet_live, fleet_report

__all__ = ["get_device_activity", "get_device_series", "get_fleet", "get_fleet_live"]

_LIVE = dt.timedelta(minutes=5)


async def get_fleet(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, FleetQuery)
    now = dt.datetime.now(dt.UTC)
    pool = context_of(request).pool
    return reply(await fleet_report(pool, caller.tenant_id, caller.tenant, q, now=now))


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
        await devices.show_device(conn, caller.tenant, name)  # 404 for another tenant's
    now, window = dt.datetime.now(dt.UTC), dt.timedelta(minutes=q.window_minutes)
    # Made per request, as Redis above: the client underneath is shared per DSN.
    clickhouse = (
        None
        if ctx.settings.clickhouse_dsn is None
        else ClickHouse(ctx.settings.clickhouse(), ctx.settings.clickhouse_database)
    )
    table = Names(namespace=ctx.settings.namespace).analytics_table
    series = await device_series(
        clickhouse, table, tenant=caller.tenant, device=name, now=now, window=window
    )
    return reply(series)


async def get_fleet_live(request: web.Request) -> web.Response:
    ctx, caller = context_of(request), caller_of(request)
    now = dt.datetime.now(dt.UTC)
    names = Names(namespace=ctx.settings.namespace)
    stream, durable = names.telemetry_stream, names.ingest_durable
    try:
        info = await ctx.nats.jetstream().consumer_info(stream, durable)
        consumer = ConsumerPending(stream=stream, durable=durable, pending=info.num_pending or 0,
                                   ack_pending=info.num_ack_pending or 0)  # fmt: skip
    except (NatsError, TimeoutError):  # no consumer yet (no ingest ran), or NATS is away
        consumer = None
    async with ctx.pool.acquire() as conn:
        live = await fleet_live(conn, caller.tenant_id, now=now, window=_LIVE, consumer=consumer)
    return reply(live)
