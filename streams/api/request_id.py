"""Every API request gets an id, is logged once (the access log) and answers with its id.

A client (or a proxy in front of the API) may send ``X-Request-Id``; a well-formed one (1–128
characters of letters, digits and ``-._:``) is kept so the client's logs and Tideway's join,
anything else is replaced by a fresh one rather than trusted into the logs. The id is bound
as the ``request_id`` log field for everything the request logs, and returned in the
response's ``X-Request-Id`` header.

The access log line names the method, the route *template* and the status — not the path or
the query a client sent, which may hold anything (spec 000 §15: no raw location values).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web

from streams.observability.http_metrics import route_label
from streams.observability.logs import log_context

HEADER = "X-Request-Id"
REQUEST_ID = web.RequestKey("request_id", str)
"""The request's id, for error bodies (set by :func:`request_ids`)."""
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:-]{1,128}")

access_log = logging.getLogger("streams.api.access")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_id_of(request: web.Request) -> str:
    """The client's ``X-Request-Id`` when well-formed, else a new one."""
    sent = request.headers.get(HEADER, "")
    return sent if _WELL_FORMED.fullmatch(sent) else uuid.uuid4().hex


@web.middleware
async def request_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bind the request id for the request, log it once, and return it as a header."""
    request_id = request_id_of(request)
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    status = 500
    with log_context(request_id=request_id):
        try:
            response = await handler(request)
            status = response.status
            response.headers[HEADER] = request_id
            return response
        except web.HTTPException as exc:  # normally answered inside; kept for completeness
            status = exc.status
            exc.headers[HEADER] = request_id
            raise
        finally:
            access_log.info(
                "%s %s %d", request.method, route_label(request), status,
                extra={"method": request.method, "route": route_label(request),
                       "status": status,
                       "duration_ms": round((time.perf_counter() - started) * 1000, 3)},
            )
