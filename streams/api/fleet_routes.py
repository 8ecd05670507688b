"""The console's fleet and device views.

``GET /v1/fleet``: ingest by status, open dead letters, and each device's data-quality figures
over a recent window (:mod:`streams.ingest.data_quality`). ``GET /v1/devices/{device}/activity``:
one device's hot state from Redis and its newest envelopes with their status.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from schemas.api import DeviceActivity, DeviceQuality, FleetQuery, FleetReport, RecentMessage
from streams import registry
from streams.adapters.redis import redis_client
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.ingest.data_quality import device_quality, fleet_totals, recent_messages
from streams.ingest.hot_state import HotState
from streams.names import Names

__all__ = ["get_device_activity", "get_fleet"]

_RECENT = 50


async def get_fleet(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, FleetQuery)
    now, window = dt.datetime.now(dt.UTC), dt.timedelta(minutes=q.window_minutes)
    async with context_of(request).pool.acquire() as conn:
        rows = await device_quality(
            conn, caller.tenant_id, now=now, window=window, sort=q.sort,
            descending=q.order == "desc", search=q.search, limit=q.limit,
        )  # fmt: skip
        totals = await fleet_totals(conn, caller.tenant_id, caller.tenant, now=now, window=window)
    statuses: dict[str, int] = totals["statuses"]
    return reply(
        FleetReport(
            at=now,
            window_s=int(window.total_seconds()),
            statuses=statuses,
            rate_per_min=sum(statuses.values()) / q.window_minutes,
            open_dead_letters=totals["open_dead_letters"],
            matched=rows[0]["matched"] if rows else 0,
            devices=[DeviceQuality.model_validate(r) for r in rows],
        )
    )


async def get_device_activity(request: web.Request) -> web.Response:
    ctx, caller, name = context_of(request), caller_of(request), path_text(request, "device")
    async with ctx.pool.acquire() as conn:
        await registry.show_device(conn, caller.tenant, name)  # 404 for another tenant's
        rows = await recent_messages(conn, caller.tenant_id, name, limit=_RECENT)
    # Redis is read per request, as redrive does: the API process keeps no Redis connection.
    redis = redis_client(ctx.settings.redis())
    try:
        key = Names(namespace=ctx.settings.namespace).hot_state_key(caller.tenant, name)
        state = await HotState(redis).read(key)
    finally:
        await redis.aclose()
    messages = [RecentMessage.model_validate(r) for r in rows]
    return reply(DeviceActivity(device=name, state=state, messages=messages))
