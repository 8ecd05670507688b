"""The console's fleet page: the HTTP side of :mod:`streams.views.fleet` for the whole tenant
(one device's activity and series are :mod:`streams.api.device_routes`').

``GET /v1/fleet``: ingest by status, open dead letters, and each device's data-quality figures
over a recent window. ``GET /v1/fleet/live``: end-to-end latency over the last minutes and the
ingest consumer's pending counts (one ``CONSUMER.INFO``, as the metrics sampler asks).
``GET /v1/fleet/history``: the charts' buckets over a chosen range
(:mod:`streams.views.fleet_history`).
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from schemas.api import (
    ConsumerPending,
    FleetHistory,
    FleetHistoryQuery,
    FleetLive,
    FleetQuery,
    FleetReport,
)
from streams.adapters.errors import NatsError
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.openapi import Route
from streams.names import Names
from streams.views.fleet import fleet_live, fleet_report
from streams.views.fleet_history import fleet_history

__all__ = ["ROUTES", "get_fleet", "get_fleet_history", "get_fleet_live"]

_LIVE = dt.timedelta(minutes=5)


async def get_fleet(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, FleetQuery)
    now = dt.datetime.now(dt.UTC)
    pool = context_of(request).pool
    return reply(await fleet_report(pool, caller.tenant_id, caller.tenant, q, now=now))


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


async def get_fleet_history(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, FleetHistoryQuery)
    now = dt.datetime.now(dt.UTC)
    async with context_of(request).pool.acquire() as conn:
        return reply(await fleet_history(conn, caller.tenant_id, q.range, now=now))


_TAG = "devices"

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/fleet", handler=get_fleet, tag=_TAG,
          summary="Ingest by status, open dead letters and each device's data quality over a "
                  "recent window", query=FleetQuery, response=FleetReport),
    Route(method="GET", path="/v1/fleet/live", handler=get_fleet_live, tag=_TAG,
          summary="End-to-end ingest latency over the last 5 min and the ingest consumer's "
                  "pending counts", response=FleetLive),
    Route(method="GET", path="/v1/fleet/history", handler=get_fleet_history, tag=_TAG,
          summary="Envelopes per status and end-to-end latency (p50, p99) in 60 time buckets "
                  "over the last 15 min, 1 h, 6 h or 24 h", query=FleetHistoryQuery,
          response=FleetHistory),
)  # fmt: skip
