"""What API handlers share: the process context, the authenticated caller, error bodies."""

from __future__ import annotations

from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any

from aiohttp import web

from schemas.api import Problem
from streams.adapters.nats import Nats
from streams.api.keys import Caller
from streams.api.tenant_db import TenantPool
from streams.config import Settings
from streams.objects import ObjectStore

__all__ = [
    "CONTEXT",
    "HTTP_CODES",
    "ApiContext",
    "caller_of",
    "context_of",
    "error_response",
    "http_code",
]


@dataclass(frozen=True, kw_only=True)
class ApiContext:
    """Connections and settings every handler may use (one per API process)."""

    settings: Settings
    pool: Any
    store: ObjectStore
    nats: Nats
    tenant_bound: bool = True
    """Requests' statements carry their tenant for row-level security (always, but for
    ``bench/console.py``'s baseline, which measures what that costs)."""


CONTEXT = web.AppKey("context", ApiContext)
_CALLER = web.RequestKey("caller", Caller)
_SCOPED = web.RequestKey("tenant_context", ApiContext)


def context_of(request: web.Request) -> ApiContext:
    """The process context as this request may use it: once the caller is known, its
    ``pool`` runs every statement with the caller's tenant set, for the row-level security
    policies (:mod:`streams.api.tenant_db`)."""
    scoped: ApiContext | None = request.get(_SCOPED)
    if scoped is not None:
        return scoped
    ctx = request.app[CONTEXT]
    caller: Caller | None = request.get(_CALLER)
    if caller is None or not ctx.tenant_bound:
        return ctx
    scoped = replace(ctx, pool=TenantPool(ctx.pool, caller.tenant_id, caller.tenant))
    request[_SCOPED] = scoped
    return scoped


def set_caller(request: web.Request, caller: Caller) -> None:
    request[_CALLER] = caller


def caller_of(request: web.Request) -> Caller:
    """The authenticated caller of ``request`` (set by the auth middleware)."""
    caller: Caller = request[_CALLER]
    return caller


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    request_id: str | None = None,
) -> web.Response:
    """The error body every failure uses: RFC 9457 problem details with a stable ``code``."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    problem = Problem(
        type=f"urn:tideway:error:{code}",
        title=title,
        status=status,
        detail=message,
        code=code,
        request_id=request_id,
    )
    return web.Response(
        body=problem.model_dump_json(exclude_none=True).encode(),
        status=status,
        headers=headers,
        content_type="application/problem+json",
    )


# Codes for the failures aiohttp itself detects (no route, wrong method, unparseable request,
# oversized body); the application's own errors carry their codes from ``streams.errors``.
HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    500: "INTERNAL_ERROR",
}


def http_code(status: int) -> str:
    """The stable error code for an HTTP-level failure with ``status``."""
    return HTTP_CODES.get(status, f"HTTP_{status}")
