"""Request and response bodies through the ``schemas.api`` models, the API's one wire format.

A handler reads its query string with :func:`query_of` and its JSON body with :func:`body_of`
(either answers 400 ``USAGE_ERROR`` naming the field, never echoing the value, when the input
does not fit) and answers with :func:`reply`. The OpenAPI document describes the same models,
so what is served and what is documented are one thing.

A JSON body is what the document says it is: required (``{}`` asks for every default; an
empty request is a 400, not a silent "all defaults") and sent as ``application/json`` (any
other ``Content-Type``, or none, is a 415 ``UNSUPPORTED_MEDIA_TYPE``), so a client that sends
the right bytes with the wrong label learns it instead of depending on the API guessing.
"""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from streams.errors import UsageError

__all__ = ["body_of", "query_of", "reply"]

M = TypeVar("M", bound=BaseModel)

_MAX_JSON_BODY = 1 << 20  # JSON bodies are small (a note, a sample payload)
_JSON = "application/json"


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
    """The request's JSON body as ``model``: 400 without one, 415 when it is not labelled
    ``application/json``."""
    if request.content_length is not None and request.content_length > _MAX_JSON_BODY:
        raise UsageError(f"a JSON body is at most {_MAX_JSON_BODY} bytes")
    raw = await request.read()
    if not raw:
        raise UsageError("a JSON body is required (`{}` for the defaults)")
    if request.content_type != _JSON:  # aiohttp's: lower case, without parameters
        # An HTTP-level refusal, answered as the router's are (streams.api.server._http_error).
        raise web.HTTPUnsupportedMediaType(reason=f"a JSON body is sent as Content-Type: {_JSON}")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise _refusal("body", exc) from exc


def reply(body: BaseModel, status: int = 200) -> web.Response:
    """``body`` as the JSON answer."""
    data = body.model_dump_json(by_alias=True).encode()
    return web.Response(body=data, status=status, content_type="application/json")
