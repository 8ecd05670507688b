"""The HTTP API process: an aiohttp application with API-key auth and tenant scoping.

Routes (all JSON; see ``docs/sessions.md``)::

    GET  /v1/healthz              no auth: Postgres and NATS reachable -> 200, else 503
    POST /v1/sessions             upload a session (multipart "file" parts, or a raw body)
    GET  /v1/sessions             the caller's sessions (?device=, ?limit=)
    GET  /v1/sessions/{id}        one session with its runs and artifacts
    GET  /v1/sessions/{id}/laps   the active run's laps (one row each) and start/finish line
    GET  /v1/runs/{id}            one run: status, summary, features, jobs, datasets

Every error, whoever detects it, is ``{"error": {"code": ..., "message": ...}}``: 400 (usage,
or text that is not UTF-8 or holds NUL, or a request aiohttp cannot parse), 401 (no or bad
key), 404 (not found - including another tenant's ids - or no such route), 405 (wrong method),
413 (too large), 429 (a daily quota, named in the message), 500 (a bug) or 503 (a
dependency). The middlewares below cover everything a handler or the router raises;
:mod:`streams.api.protocol` covers what aiohttp answers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from streams.adapters import postgres
from streams.adapters.nats import connect_nats
from streams.api import routes
from streams.api.context import CONTEXT, ApiContext, error_response, http_code, set_caller
from streams.api.inputs import check_query
from streams.api.keys import authenticate
from streams.api.protocol import ApiRunner
from streams.api.request_id import request_ids
from streams.config import Settings
from streams.errors import NotFoundError, TidewayError, TransientError, UsageError
from streams.objects import ObjectStore, ObjectTooLargeError
from streams.observability.events import ProcessHooks
from streams.observability.readiness import nats_connected_check, postgres_check
from streams.sessions.quotas import QuotaExceededError

__all__ = ["build_app", "run_api"]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_PUBLIC = frozenset({"/v1/healthz"})


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_error(request, exc)
    except ObjectTooLargeError as exc:
        return error_response(413, exc.code, exc.message)
    except NotFoundError as exc:
        return error_response(404, exc.code, exc.message)
    except QuotaExceededError as exc:  # the message names the quota
        return error_response(429, exc.code, exc.message)
    except UsageError as exc:
        return error_response(400, exc.code, exc.message)
    except TransientError as exc:
        log.warning("API dependency failure: %s", exc)
        return error_response(503, exc.code, exc.message)
    except TidewayError as exc:
        return error_response(422, exc.code, exc.message)
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return error_response(500, http_code(500), "an unexpected error occurred")


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
    return error_response(exc.status, http_code(exc.status), message, headers=headers)


@web.middleware
async def _edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Before authentication and before any handler: nothing reads an unchecked query string.
    check_query(request.rel_url.raw_query_string)
    return await handler(request)


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in _PUBLIC or request.match_info.http_exception is not None:
        return await handler(request)  # public, or the router's 404/405 (no key needed)
    secret = request.headers.get("X-API-Key", "")
    bearer = request.headers.get("Authorization", "")
    if not secret and bearer.lower().startswith("bearer "):
        secret = bearer[7:].strip()
    if not secret:
        return error_response(401, "UNAUTHENTICATED", "an API key is required")
    ctx = request.app[CONTEXT]
    async with ctx.pool.acquire() as conn:
        caller = await authenticate(conn, secret)
    if caller is None:
        return error_response(401, "UNAUTHENTICATED", "unknown or revoked API key")
    set_caller(request, caller)
    return await handler(request)


def build_app(ctx: ApiContext, *, observe: Sequence[Middleware] = ()) -> web.Application:
    """The application with its routes and middlewares, bound to ``ctx``.

    ``observe``: middlewares put first (the process's request metrics), before the request
    id, the access log and the error translation."""
    chain: list[Middleware] = [*observe, request_ids, _errors, _edge, _auth]
    app = web.Application(middlewares=chain)
    app[CONTEXT] = ctx
    routes.add_routes(app)
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
            settings=settings, pool=pool, store=ObjectStore(settings.objects()), nats=nc
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
        if runner is not None:
            await runner.cleanup()
        with contextlib.suppress(Exception):
            await nc.close()
        await pool.close()
