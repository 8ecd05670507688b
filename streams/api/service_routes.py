"""The service's own routes, served without a key: ``/v1/healthz`` and ``/v1/openapi.json``.

The document is made from the whole route table (:data:`streams.api.routes.OPENAPI`), which
lists this module: the handler reads it from the application (:data:`DOCUMENT`, set by
:func:`streams.api.routes.add_routes`) rather than importing the table that imports it.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from schemas.api import Health
from streams.api.bodies import reply
from streams.api.context import context_of
from streams.api.openapi import Route

__all__ = ["DOCUMENT", "ROUTES", "healthz", "openapi"]

DOCUMENT = web.AppKey("openapi_document", bytes)
"""The OpenAPI document the application serves (its route table's)."""


async def healthz(request: web.Request) -> web.Response:
    ctx = context_of(request)
    checks: dict[str, bool] = {"nats": ctx.nats.is_connected}
    try:
        async with asyncio.timeout(2):
            async with ctx.pool.acquire() as conn:
                checks["postgres"] = await conn.fetchval("SELECT true")
    except (OSError, TimeoutError, Exception):  # any failure means "not healthy"
        checks["postgres"] = False
    ok = all(checks.values())
    return reply(Health(status="ok" if ok else "degraded", checks=checks), 200 if ok else 503)


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI document of this API (the same as the committed ``docs/openapi.json``)."""
    return web.Response(body=request.app[DOCUMENT], content_type="application/json")


ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/healthz", handler=healthz, tag="service", public=True,
          summary="Postgres and NATS reachable (503 when not)", response=Health),
    Route(method="GET", path="/v1/openapi.json", handler=openapi, tag="service", public=True,
          summary="This document",
          content={"application/json": {"schema": {"type": "object"}}}),
)  # fmt: skip
