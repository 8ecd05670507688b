"""The console's fleet and device pages as API models (``GET /v1/fleet``, ``/v1/fleet/live``,
``/v1/devices/{device}/activity``, ``/v1/devices/{device}/series``).

Each function runs its page's queries (:mod:`streams.views.data_quality`,
:mod:`streams.views.latency`, :mod:`streams.views.parameter_series`) and answers the page's model.
Connections, Redis, ClickHouse and NATS are the caller's: the route hands in what it opened.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from collections.abc import Collection
from typing import Any

from schemas.api import (
    ConsumerPending,
    DeviceActivity,
    DeviceQuality,
    DeviceSeries,
    FleetLive,
    FleetQuery,
    FleetReport,
    ParameterSeries,
    RecentMessage,
)
from streams.adapters.postgres import Conn
from streams.clickhouse import ClickHouse
from streams.errors import TransientError
from streams.views.data_quality import device_quality, fleet_totals, recent_messages
from streams.views.device_schemas import schema_parameters
from streams.views.latency import end_to_end
from streams.views.parameter_series import bucket_step, parameter_series

__all__ = [
    "RECENT",
    "boolean_parameters",
    "device_activity",
    "device_series",
    "fleet_live",
    "fleet_report",
]

RECENT = 50
"""A device page's newest envelopes."""

log = logging.getLogger(__name__)


async def fleet_report(
    pool: Any, tenant_id: Any, tenant: str, q: FleetQuery, *, now: dt.datetime
) -> FleetReport:
    """The fleet over ``q``'s window: ingest by status, open dead letters, device figures."""
    window = dt.timedelta(minutes=q.window_minutes)

    async def devices() -> list[dict[str, Any]]:
        async with pool.acquire() as conn:
            return await device_quality(
                conn, tenant_id, now=now, window=window, sort=q.sort,
                descending=q.order == "desc", search=q.search, limit=q.limit,
            )  # fmt: skip

    async def totals_() -> dict[str, Any]:
        async with pool.acquire() as conn:
            return await fleet_totals(conn, tenant_id, tenant, now=now, window=window)

    # Two independent statements on two of the pool's connections: the page waits for the
    # longer one, not for both in turn.
    rows, totals = await asyncio.gather(devices(), totals_())
    statuses: dict[str, int] = totals["statuses"]
    return FleetReport(
        at=now,
        window_s=int(window.total_seconds()),
        statuses=statuses,
        rate_per_min=sum(statuses.values()) / q.window_minutes,
        open_dead_letters=totals["open_dead_letters"],
        matched=rows[0]["matched"] if rows else 0,
        devices=[DeviceQuality.model_validate(r) for r in rows],
    )


async def device_activity(
    conn: Conn, tenant_id: Any, device: str, state: dict[str, Any]
) -> DeviceActivity:
    """The device's hot ``state`` (read by the caller from Redis) and its newest envelopes."""
    rows = await recent_messages(conn, tenant_id, device, limit=RECENT)
    messages = [RecentMessage.model_validate(r) for r in rows]
    return DeviceActivity(device=device, state=state, messages=messages)


async def device_series(
    clickhouse: ClickHouse | None,
    table: str,
    *,
    tenant: str,
    device: str,
    now: dt.datetime,
    window: dt.timedelta,
    booleans: Collection[str] = (),
) -> DeviceSeries:
    """The device's charted parameters over ``window``, or none and why (``booleans``: the
    parameters its schema declares boolean, see :func:`boolean_parameters`)."""
    series: list[ParameterSeries] = []
    step = bucket_step(window)
    reason = None
    # The charts are an extra on the device page: without ClickHouse (not configured here, or
    # an embedded engine another process holds) the answer says why, rather than failing the
    # page's call - the rest of the page reads Postgres and Redis.
    if clickhouse is None:
        reason = "NO_CLICKHOUSE"
    else:
        try:
            step, series = await parameter_series(
                clickhouse, table, tenant=tenant, device=device, now=now, window=window,
                booleans=booleans,
            )  # fmt: skip
        except TransientError as exc:
            log.warning("device charts: %s", exc)
            reason = exc.code
    return DeviceSeries(
        device=device,
        since=now - window,
        until=now,
        step_s=step.total_seconds(),
        parameters=series,
        reason=reason,
    )


async def boolean_parameters(conn: Conn, schema_version_id: uuid.UUID | None) -> frozenset[str]:
    """The names of the parameters the schema version declares ``boolean`` (none without a
    schema): their series are shares of true readings, not measurements."""
    if schema_version_id is None:
        return frozenset()
    rows = await schema_parameters(conn, schema_version_id)
    return frozenset(r["name"] for r in rows if r["type"] == "boolean")


async def fleet_live(
    conn: Conn,
    tenant_id: Any,
    *,
    now: dt.datetime,
    window: dt.timedelta,
    consumer: ConsumerPending | None,
) -> FleetLive:
    """End-to-end latency over ``window`` and the ingest consumer's backlog (``consumer``)."""
    e2e = await end_to_end(conn, tenant_id, now=now, window=window)
    return FleetLive(
        at=now,
        window_s=int(window.total_seconds()),
        envelopes=e2e["envelopes"],
        end_to_end_p50_s=e2e["p50"],
        end_to_end_p95_s=e2e["p95"],
        consumer=consumer,
    )
