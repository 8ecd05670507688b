"""Request and response bodies through the ``schemas.api`` models, the API's one wire format.

A handler reads its query string with :func:`query_of` and its JSON body with :func:`body_of`
(either answers 400 ``USAGE_ERROR`` naming the field, never echoing the value, when the input
does not fit) and answers with :func:`reply`. The OpenAPI document describes the same models,
so what is served and what is documented are one thing.
"""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from streams.errors import UsageError

__all__ = ["body_of", "query_of", "reply"]

M = TypeVar("M", bound=BaseModel)

_MAX_JSON_BODY = 1 << 20  # JSON bodies are small (a note, a sample payload)


def _refusal(what: str, exc: ValidationError) -> UsageError:
    first = exc.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or what
    return UsageError(f"{what} {where}: {first['msg']}")


def query_of(request: web.Request, model: type[M]) -> M:
    """The request's query string as ``model`` (the last of repeated parameters counts)."""
    try:
        return model.model_validate(dict(request.query))
    except ValidationError as exc:
        raise _refusal("query parameter", exc) from exc


async def body_of(request: web.Request, model: type[M]) -> M:
    """The request's JSON body as ``model`` (an empty body is ``{}``)."""
    if request.content_length is not None and request.content_length > _MAX_JSON_BODY:
        raise UsageError(f"a JSON body is at most {_MAX_JSON_BODY} bytes")
    raw = await request.read()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        raise _refusal("body", exc) from exc


def reply(body: BaseModel, status: int = 200) -> web.Response:
    """``body`` as the JSON answer."""
    data = body.model_dump_json(by_alias=True).encode()
    return web.Response(body=data, status=status, content_type="application/json")
