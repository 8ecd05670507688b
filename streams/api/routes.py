"""The API's route table, assembled from its areas.

Each area module declares its routes beside its handlers (a module-level ``ROUTES``: how each
is served and how it is described, with the ``schemas.api`` models of its query, body and
answer). :data:`ROUTES` is their concatenation in the order of :data:`AREAS`, the one list of
routes: :func:`add_routes` serves it and :func:`streams.api.openapi.document` describes it
(``/v1/openapi.json``). A route joins its area's ``ROUTES``; a new area joins :data:`AREAS`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Final

from aiohttp import web

from streams.api import (
    credential_routes,
    dead_letter_routes,
    device_routes,
    event_stream,
    fleet_routes,
    message_routes,
    run_routes,
    schema_routes,
    service_routes,
    session_dlq_routes,
    session_routes,
    track_routes,
)
from streams.api import path_params as pp
from streams.api.openapi import Handler, Route, document, dumps
from streams.errors import NotFoundError

__all__ = ["AREAS", "OPENAPI", "ROUTES", "add_routes"]

AREAS: Final[tuple[ModuleType, ...]] = (
    service_routes,
    session_routes,
    run_routes,
    track_routes,
    fleet_routes,
    device_routes,
    credential_routes,
    schema_routes,
    dead_letter_routes,
    session_dlq_routes,
    event_stream,
    message_routes,
)
"""The area modules, each with its ``ROUTES``, in the order the table lists them."""

ROUTES: Final[tuple[Route, ...]] = tuple(route for area in AREAS for route in area.ROUTES)

OPENAPI: Final[bytes] = dumps(document(ROUTES))
"""The served document (made once: the table does not change while the process runs)."""


def add_routes(app: web.Application) -> None:
    """Serve every route of :data:`ROUTES` on ``app``."""
    app[service_routes.DOCUMENT] = OPENAPI
    for route in ROUTES:  # GET routes answer HEAD too (aiohttp's add_get)
        if route.method == "GET":
            app.router.add_get(route.path, _served(route), name=route.operation_id)
        else:
            app.router.add_route(route.method, route.path, _served(route),
                                 name=route.operation_id)  # fmt: skip
    event_stream.setup(app)


def _served(route: Route) -> Handler:
    """``route``'s handler behind what the table declares for it: path parameters of their
    kinds (a 400 otherwise, before the handler runs) and every not-found answered with the
    route's one text (:attr:`Route.not_found`: never a text a domain function worded)."""
    not_found = route.not_found or "not found"

    async def serve(request: web.Request) -> web.StreamResponse:
        pp.check_path(request, route.path_types)
        try:
            return await route.handler(request)
        except NotFoundError:
            raise NotFoundError(not_found) from None

    return serve
