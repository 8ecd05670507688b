"""An aiohttp middleware counting API requests by route template and timing them.

The ``route`` label is the matched resource's *template* (``/v1/runs/{run_id}``), never the
path a client sent, and unknown methods are folded into ``other``: a client cannot create new
series by making up URLs or verbs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from streams.observability.metrics import Metrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]

UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def metrics_middleware(metrics: Metrics) -> Middleware:
    """The middleware to put first in ``web.Application(middlewares=[...])``."""

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500  # an exception that is not an HTTP response becomes a 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            route = route_label(request)
            method = request.method if request.method in _METHODS else "other"
            metrics.api_requests.labels(route, method, str(status)).inc()
            metrics.api_duration.labels(route, method).observe(time.perf_counter() - started)

    return observe


def route_label(request: web.Request) -> str:
    """The template of the route ``request`` matched, or ``unmatched``."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED
