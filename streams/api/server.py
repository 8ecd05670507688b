"""The HTTP API process: an aiohttp application with API-key auth and tenant scoping.

Routes: the table :data:`streams.api.routes.ROUTES`, described by the OpenAPI document served
at ``/v1/openapi.json`` (committed as ``docs/openapi.json``; see ``docs/api.md``), and the web
console at ``/`` (:mod:`streams.api.static`).

Every error, whoever detects it, is an RFC 9457 problem (``application/problem+json``) with a
stable ``code``: 400 (usage, or text that is not UTF-8 or holds NUL, or a request aiohttp cannot
parse), 401 (no or bad key), 404 (not found - including another tenant's ids - or no such
route), 405 (wrong method), 409 (an action the thing's state refuses), 413 (too large), 422
(another Tideway rule), 429 (a daily quota, named in the
detail), 500 (a bug) or 503 (a dependency). The middlewares below cover
everything a handler or the router raises; :mod:`streams.api.protocol` covers what aiohttp
answers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from schemas import error_codes as codes
from streams.adapters import postgres
from streams.adapters.errors import PG_UNREACHABLE
from streams.adapters.nats import connect_nats
from streams.api import routes
from streams.api.context import CONTEXT, ApiContext, error_response, http_code, set_caller
from streams.api.inputs import check_query
from streams.api.key_cache import KeyCache
from streams.api.keys import authenticate
from streams.api.protocol import ApiRunner
from streams.api.request_id import REQUEST_ID, request_ids
from streams.api.static import add_console, is_console_path
from streams.config import Settings
from streams.errors import NotFoundError, TidewayError, TransientError, UsageError
from streams.objects import API_DELETES, ObjectStore, ObjectTooLargeError
from streams.observability.events import ProcessHooks
from streams.observability.readiness import nats_connected_check, postgres_check
from streams.sessions.quotas import QuotaExceededError

__all__ = ["build_app", "run_api"]

log = logging.getLogger(__name__)
_KEYS = web.AppKey("verified_keys", KeyCache)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_PUBLIC = frozenset(route.path for route in routes.ROUTES if route.public)
# Refusals of an action by the state of what it acts on (409 Conflict rather than 400).
_CONFLICTS = frozenset({codes.RUN_NOT_RETRIABLE, codes.NO_PREVIOUS_RUN, codes.DEVICE_EXISTS,
                        codes.RUN_TERMINAL, codes.ROLLBACK_VERIFICATION_FAILED,
                        codes.EXPORT_UNAVAILABLE,
                        codes.NO_TIMED_LINE})


def _problem(request: web.Request, status: int, code: str, message: str, **kw: Any) -> web.Response:
    return error_response(status, code, message, request_id=request.get(REQUEST_ID), **kw)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_error(request, exc)
    except ObjectTooLargeError as exc:
        return _problem(request, 413, exc.code, exc.message)
    except NotFoundError as exc:
        return _problem(request, 404, exc.code, exc.message)
    except QuotaExceededError as exc:  # the detail names the quota
        return _problem(request, 429, exc.code, exc.message)
    except UsageError as exc:
        return _problem(request, 409 if exc.code in _CONFLICTS else 400, exc.code, exc.message)
    except (*PG_UNREACHABLE, TransientError) as exc:
        return _unavailable(request, request.app[CONTEXT], exc)
    except TidewayError as exc:
        return _problem(request, 422, exc.code, exc.message)
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return _problem(request, 500, http_code(500), "an unexpected error occurred")


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    """What the router or aiohttp raised (404, 405, 413...) as the JSON error body."""
    headers = {}
    if isinstance(exc, web.HTTPMethodNotAllowed):
        headers["Allow"] = exc.headers["Allow"]
        message = f"{request.method} is not allowed here (allowed: {exc.headers['Allow']})"
    elif exc.status == 404:
        message = "no such route"  # not the path: it may hold anything the client sent
    else:
        message = exc.reason
    return _problem(request, exc.status, http_code(exc.status), message, headers=headers)


@web.middleware
async def _edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Before authentication and before any handler: nothing reads an unchecked query string.
    check_query(request.rel_url.raw_query_string)
    return await handler(request)


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    public = request.path in _PUBLIC or is_console_path(request.path)
    if public or request.match_info.http_exception is not None:
        return await handler(request)  # public, the console's files, or the router's 404/405
    secret = request.headers.get("X-API-Key", "")
    bearer = request.headers.get("Authorization", "")
    if not secret and bearer.lower().startswith("bearer "):
        secret = bearer[7:].strip()
    if not secret:
        return _problem(request, 401, codes.UNAUTHENTICATED, "an API key is required")
    ctx = request.app[CONTEXT]
    keys = request.app[_KEYS]
    try:
        async with ctx.pool.acquire() as conn:
            caller = await authenticate(conn, secret)
    except (*PG_UNREACHABLE, TimeoutError, TransientError) as exc:
        # Postgres cannot say: a key verified lately goes on (streams.api.key_cache).
        caller = keys.recent(secret)
        if caller is None:
            return _unavailable(request, ctx, exc)
    else:
        if caller is None:
            keys.forget(secret)
            return _problem(request, 401, codes.UNAUTHENTICATED, "unknown or revoked API key")
        keys.verified(secret, caller)
    set_caller(request, caller)
    return await handler(request)


def _unavailable(request: web.Request, ctx: ApiContext, exc: BaseException) -> web.Response:
    """503 with ``Retry-After`` for a dependency that cannot be reached now."""
    if isinstance(exc, TransientError):
        code, message = exc.code, exc.message
    else:
        code, message = codes.PG_UNAVAILABLE, "Postgres is unavailable; retry later"
    log.warning("API dependency unavailable: %s", code)
    return _problem(request, 503, code, message,
                    headers={"Retry-After": str(ctx.settings.api.retry_after_s)})


def build_app(ctx: ApiContext, *, observe: Sequence[Middleware] = ()) -> web.Application:
    """The application with its routes and middlewares, bound to ``ctx``.

    ``observe``: middlewares put first (the process's request metrics), before the request
    id, the access log and the error translation."""
    chain: list[Middleware] = [*observe, request_ids, _errors, _edge, _auth]
    app = web.Application(middlewares=chain)
    app[CONTEXT] = ctx
    app[_KEYS] = KeyCache(ctx.settings.api.key_outage_grace_s)
    routes.add_routes(app)
    add_console(app)
    return app


async def run_api(
    settings: Settings, *, stop: asyncio.Event, hooks: ProcessHooks | None = None
) -> None:
    """Serve the API on ``settings.api.host:port`` until ``stop`` is set.

    ``hooks``: the process's observability (readiness checks of Postgres and NATS, and the
    request metrics middleware)."""
    pool = await postgres.create_pool(settings.postgres(), postgres.API_POOL)
    nc = await connect_nats(settings.nats, name="tideway-api")
    runner: web.AppRunner | None = None
    try:
        ctx = ApiContext(
            settings=settings, pool=pool, nats=nc,
            store=ObjectStore(settings.objects(), deletes=API_DELETES),
        )
        observe: list[Middleware] = []
        if hooks is not None:
            hooks.ready("api", postgres_check(pool), nats_connected_check(nc))
            observe.append(hooks.http_middleware())
        # aiohttp's own access log stays off: ``request_ids`` writes one with the request id.
        runner = ApiRunner(build_app(ctx, observe=observe), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, settings.api.host, settings.api.port)
        await site.start()
        log.info("API listening on http://%s:%s", settings.api.host, settings.api.port)
        await stop.wait()
    finally:
        if hooks is not None:
            await hooks.stopping("api")
        if runner is not None:
            await runner.cleanup()
        with contextlib.suppress(Exception):
            await nc.close()
        await pool.close()
