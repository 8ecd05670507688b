"""What API handlers share: the process context, the authenticated caller, error bodies."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from nats.aio.client import Client as NatsClient

from schemas.api import Problem
from streams.api.keys import Caller
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
    nats: NatsClient


CONTEXT = web.AppKey("context", ApiContext)
_CALLER = web.RequestKey("caller", Caller)


def context_of(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]


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
    500: "INTERNAL_ERROR",
}


def http_code(status: int) -> str:
    """The stable error code for an HTTP-level failure with ``status``."""
    return HTTP_CODES.get(status, f"HTTP_{status}")
