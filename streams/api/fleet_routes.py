"""The console's fleet and device views.

``GET /v1/fleet``: ingest by status, open dead letters, and each device's data-quality figures
over a recent window (:mod:`streams.ingest.data_quality`). ``GET /v1/devices/{device}/activity``:
one device's hot state from Redis and its newest envelopes with their status.
``GET /v1/devices/{device}/series``: its numeric parameters over a recent window from ClickHouse
(:mod:`streams.ingest.parameter_series`). ``GET /v1/fleet/live``: end-to-end latency over the
last minutes (:mod:`streams.ingest.latency`) and the ingest consumer's pending counts (one
``CONSUMER.INFO``, as the metrics sampler asks).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

from aiohttp import web

from schemas.api import (
    ConsumerPending,
    DeviceActivity,
    DeviceQuality,
    DeviceSeries,
    DeviceSeriesQuery,
    FleetLive,
    FleetQuery,
    FleetReport,
    ParameterSeries,
    RecentMessage,
)
from streams import registry
from streams.adapters.errors import NatsError
from streams.adapters.redis import redis_client
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.clickhouse import ClickHouse
from streams.errors import TransientError
from streams.ingest.data_quality import device_quality, fleet_totals, recent_messages
from streams.ingest.hot_state import HotState
from streams.ingest.latency import end_to_end
from streams.ingest.parameter_series import parameter_series
from streams.names import Names

__all__ = ["get_device_activity", "get_device_series", "get_fleet", "get_fleet_live"]

log = logging.getLogger(__name__)

_RECENT = 50
_LIVE = dt.timedelta(minutes=5)


async def get_fleet(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, FleetQuery)
    now, window = dt.datetime.now(dt.UTC), dt.timedelta(minutes=q.window_minutes)
    pool = context_of(request).pool

    async def devices() -> list[dict[str, Any]]:
        async with pool.acquire() as conn:
            return await device_quality(
                conn, caller.tenant_id, now=now, window=window, sort=q.sort,
                descending=q.order == "desc", search=q.search, limit=q.limit,
            )  # fmt: skip

    async def totals_() -> dict[str, Any]:
        async with pool.acquire() as conn:
            return await fleet_totals(conn, caller.tenant_id, caller.tenant, now=now,
                                      window=window)  # fmt: skip

    # Two independent statements on two of the pool's connections: the page waits for the
    # longer one, not for both in turn.
    rows, totals = await asyncio.gather(devices(), totals_())
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


async def get_device_series(request: web.Request) -> web.Response:
    ctx, caller, name = context_of(request), caller_of(request), path_text(request, "device")
    q = query_of(request, DeviceSeriesQuery)
    async with ctx.pool.acquire() as conn:
        await registry.show_device(conn, caller.tenant, name)  # 404 for another tenant's
    now, window = dt.datetime.now(dt.UTC), dt.timedelta(minutes=q.window_minutes)
    series: list[dict[str, Any]] = []
    reason = None
    # The charts are an extra on the device page: without ClickHouse (not configured here, or
    # an embedded engine another process holds) the answer says why, rather than failing the
    # page's call - the rest of the page reads Postgres and Redis.
    if ctx.settings.clickhouse_dsn is None:
        reason = "NO_CLICKHOUSE"
    else:
        # Made per request, as Redis above: the client underneath is shared per DSN.
        clickhouse = ClickHouse(ctx.settings.clickhouse(), ctx.settings.clickhouse_database)
        try:
            series = await parameter_series(
                clickhouse, Names(namespace=ctx.settings.namespace).analytics_table,
                tenant=caller.tenant, device=name, now=now, window=window,
            )  # fmt: skip
        except TransientError as exc:
            log.warning("device charts: %s", exc)
            reason = exc.code
    return reply(
        DeviceSeries(
            device=name,
            since=now - window,
            until=now,
            parameters=[ParameterSeries.model_validate(p) for p in series],
            reason=reason,
        )
    )


async def get_fleet_live(request: web.Request) -> web.Response:
    ctx, caller = context_of(request), caller_of(request)
    now = dt.datetime.now(dt.UTC)
    async with ctx.pool.acquire() as conn:
        e2e = await end_to_end(conn, caller.tenant_id, now=now, window=_LIVE)
    names = Names(namespace=ctx.settings.namespace)
    stream, durable = names.telemetry_stream, names.ingest_durable
    try:
        info = await ctx.nats.jetstream().consumer_info(stream, durable)
        consumer = ConsumerPending(stream=stream, durable=durable, pending=info.num_pending or 0,
                                   ack_pending=info.num_ack_pending or 0)  # fmt: skip
    except (NatsError, TimeoutError):  # no consumer yet (no ingest ran), or NATS is away
        consumer = None
    return reply(
        FleetLive(
            at=now,
            window_s=int(_LIVE.total_seconds()),
            envelopes=e2e["envelopes"],
            end_to_end_p50_s=e2e["p50"],
            end_to_end_p95_s=e2e["p95"],
            consumer=consumer,
        )
    )
