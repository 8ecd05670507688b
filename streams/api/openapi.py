"""The API's OpenAPI 3.1 document, made from the same route table that registers the routes.

Each :class:`Route` names its handler *and* the models of its query string, JSON body and
answer (``schemas.api``); :func:`streams.api.routes.add_routes` registers the handlers from the
table and :func:`document` describes them from it, with the models' own JSON Schemas (pydantic
writes JSON Schema 2020-12, which OpenAPI 3.1 uses as is). A route cannot be served without
being described, and a described body is the one the handler validates and builds.

Why not a library: the maintained aiohttp ones either want class-based views with their own
request parsing (aiohttp-pydantic, documents 3.0) or describe routes in docstrings
(aiohttp-apispec, unmaintained); the table below is about as long as their glue would be.

``docs/openapi.json`` is the committed copy: regenerate it with ``python -m streams.api >
docs/openapi.json`` (a test fails when it differs from the served document).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from schemas.api import Problem
from streams.api.path_params import PathParam

__all__ = ["PROBLEM_JSON", "Handler", "Route", "document", "dumps"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROBLEM_JSON: Final = "application/problem+json"
_VERSION: Final = "1"

# Error statuses every authenticated route may answer (beyond its own ``errors``).
_COMMON_ERRORS: Final = {
    400: "The request is malformed (a path parameter, query parameter, body or cursor not as "
    "documented).",
    401: "No API key, or an unknown or revoked one.",
    503: "A dependency (Postgres, NATS) is unavailable; try again later.",
}
_ERRORS: Final = {
    **_COMMON_ERRORS,
    409: "The action does not apply to the thing in its current state.",
    413: "The upload is larger than the limit.",
    415: "The body is not `application/json` (every JSON body must be sent as one).",
    422: "The request was understood but refused by a Tideway rule (see its code).",
    429: "A daily quota of the tenant (files or bytes) is used up; the detail names it.",
}


@dataclass(frozen=True, kw_only=True)
class Route:
    """One API route: how it is served and how it is described."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    handler: Handler
    summary: str
    tag: str
    response: type[BaseModel] | None = None
    status: int = 200
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    public: bool = False
    errors: tuple[int, ...] = ()
    """Statuses beyond the common ones this route answers (409/422 for refusals, 413, 429);
    404 comes with ``not_found`` and 415 with ``body``."""
    path_types: Mapping[str, PathParam] = field(default_factory=dict)
    """The kind of each ``{parameter}`` of the path: its schema and its check."""
    not_found: str | None = None
    """The whole detail of this route's 404, whatever was not found and whoever has it.

    The functions a handler calls word their not-found for an operator (``no envelope with id
    21``), and some of them find a thing first and check its tenant after: such a text names
    another tenant's internal ids, and its difference from an unknown id's text tells the
    caller that the id exists elsewhere. So the route answers every not-found with this one
    text, which depends on nothing but the route: another tenant's ids, keys and names are
    answered byte for byte as unknown ones are (tests/integration/api/test_isolation.py)."""
    content: Mapping[str, Any] | None = None
    """The answer's ``content`` when it is not a JSON model (an event stream, a document)."""
    request_content: Mapping[str, Any] | None = None
    """The request body's ``content`` when it is not a JSON model (an upload)."""
    headers: Mapping[str, Any] = field(default_factory=dict)
    """Headers of the answer beyond ``X-Request-Id``, as OpenAPI header objects."""
    description: str | None = None

    def __post_init__(self) -> None:
        named = set(re.findall(r"{(\w+)}", self.path))
        if named != set(self.path_types):
            raise ValueError(f"{self.path}: give each path parameter its kind ({sorted(named)})")
        if named and self.not_found is None:
            raise ValueError(f"{self.path}: a path that names things says what its 404 says")
        if 404 in self.errors:
            raise ValueError(f"{self.path}: a route's 404 is its `not_found` text")

    @property
    def operation_id(self) -> str:
        return self.handler.__name__


def _parameters(route: Route) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for name in re.findall(r"{(\w+)}", route.path):
        kind = route.path_types[name]
        param: dict[str, Any] = {"name": name, "in": "path", "required": True}
        if kind.description:
            param["description"] = kind.description
        param["schema"] = kind.described()
        params.append(param)
    if route.query is not None:
        described = route.query.model_json_schema(mode="validation")
        required = set(described.get("required", ()))
        for name, schema in described["properties"].items():
            schema = _query_schema({k: v for k, v in schema.items() if k != "title"})
            param = {"name": name, "in": "query", "required": name in required}
            if "description" in schema:
                param["description"] = schema.pop("description")
            param["schema"] = schema
            params.append(param)
    return params


def _query_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema without pydantic's ``null`` alternative: a query string
    cannot say null (``?cursor=`` is the empty string); leaving the parameter out says it."""
    options = schema.get("anyOf")
    if options and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        schema = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        schema = {**(rest[0] if len(rest) == 1 else {"anyOf": rest}), **schema}
    return schema


def _ref(model: type[BaseModel], mode: JsonSchemaMode, names: Mapping[Any, Any]) -> Any:
    return names[(model, mode)]


def _operation(route: Route, names: Mapping[Any, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
    }
    if route.description:
        op["description"] = route.description
    params = _parameters(route)
    if params:
        op["parameters"] = params
    if route.body is not None:
        op["requestBody"] = {
            "required": True,
            "description": "Required (`{}` asks for every default), as `application/json`.",
            "content": {"application/json": {"schema": _ref(route.body, "validation", names)}},
        }
    elif route.request_content is not None:
        op["requestBody"] = {"required": True, "content": dict(route.request_content)}
    if route.public:
        op["security"] = []
    ok: dict[str, Any] = {"description": HTTPStatus(route.status).phrase}
    ok["headers"] = {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}, **route.headers}
    if route.response is not None:
        schema = _ref(route.response, "serialization", names)
        ok["content"] = {"application/json": {"schema": schema}}
    elif route.content is not None:
        ok["content"] = dict(route.content)
    responses: dict[str, Any] = {str(route.status): ok}
    statuses = {400, 503} | ({401} if not route.public else set()) | set(route.errors)
    if route.body is not None:
        statuses.add(415)
    for status in sorted(statuses):
        responses[str(status)] = {"$ref": f"#/components/responses/Problem{status}"}
    if route.not_found is not None:
        responses["404"] = _problem_response(
            f"Not found, or not the caller's: another tenant's ids, keys and names are answered "
            f"as unknown ones, byte for byte. The detail is always `{route.not_found}`."
        )
    responses["default"] = {"$ref": "#/components/responses/Problem"}
    op["responses"] = responses
    return op


def _problem_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}},
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def document(routes: Sequence[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing ``routes``."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(Problem, "serialization")]
    for route in routes:
        if route.response is not None:
            wanted.append((route.response, "serialization"))
        if route.body is not None:
            wanted.append((route.body, "validation"))
    names, top = models_json_schema(
        list(dict.fromkeys(wanted)), ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, names)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Tideway API",
            "version": _VERSION,
            "summary": "Sessions, runs, devices, schemas, dead letters and events of a tenant.",
            "description": "See docs/api.md: authentication, pagination, errors and events.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": paths,
        "components": {
            "schemas": top.get("$defs", {}),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API key."},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
            "headers": {
                "RequestId": {
                    "description": "The request's id (the client's X-Request-Id if well formed).",
                    "schema": {"type": "string"},
                }
            },
            "responses": {
                "Problem": _problem_response("An error (RFC 9457 problem details)."),
                **{f"Problem{s}": _problem_response(d) for s, d in sorted(_ERRORS.items())},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
    }


def dumps(doc: Mapping[str, Any]) -> bytes:
    """The document as the API serves and the repository commits it (sorted, indented)."""
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
