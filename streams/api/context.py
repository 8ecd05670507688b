"""What API handlers share: the process context, the authenticated caller, error bodies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web
from nats.aio.client import Client as NatsClient

from streams.api.keys import Caller
from streams.config import Settings
from streams.objects import ObjectStore

__all__ = ["CONTEXT", "ApiContext", "caller_of", "context_of", "error_response"]


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


def error_response(status: int, code: str, message: str) -> web.Response:
    """The JSON error body every failure uses."""
    return web.json_response({"error": {"code": code, "message": message}}, status=status)
