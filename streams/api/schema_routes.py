"""Device schemas of the caller's tenant: list, show a version, and try a payload on one.

The reads are the read side's (``streams.views.device_schemas``), the ones ``tideway schema``
calls; a schema is named by its name within the tenant, so another tenant's schemas are simply
not found. Trying a payload runs the stored version's validate, mutate and derive (the pure
stages' dry run), storing nothing.
"""

from __future__ import annotations

from aiohttp import web

from schemas.api import (
    SchemaPage,
    SchemaQuery,
    SchemaTestReport,
    SchemaTestRequest,
    SchemaVersion,
    SchemaVersionQuery,
)
from stages.ingest.dry_run import evaluate_sample
from streams.api import path_params as pp
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, page_of, text
from streams.errors import NotFoundError
from streams.views import device_schemas

__all__ = ["ROUTES", "get_schema", "list_schemas", "test_schema"]


async def list_schemas(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, SchemaQuery)
    after = decode_cursor(q.cursor, text)
    async with context_of(request).pool.acquire() as conn:
        rows = await device_schemas.list_schemas(
            conn, caller.tenant, after=after[0] if after else None, limit=q.limit + 1
        )
    items, next_ = page_of(request, rows, q.limit, lambda s: (s.name,))
    return reply(SchemaPage(items=items, next=next_))


async def get_schema(request: web.Request) -> web.Response:
    caller, name = caller_of(request), path_text(request, "name")
    q = query_of(request, SchemaVersionQuery)
    async with context_of(request).pool.acquire() as conn:
        found = await device_schemas.show_schema(conn, caller.tenant, name, q.version)
    return reply(found)


async def test_schema(request: web.Request) -> web.Response:
    """Run a sample through validate, mutate and derive of a stored schema version."""
    caller, name = caller_of(request), path_text(request, "name")
    body = await body_of(request, SchemaTestRequest)
    async with context_of(request).pool.acquire() as conn:
        found = await device_schemas.show_schema(conn, caller.tenant, name, body.version)
    program = device_schemas.programs(found).get(body.topic)
    if program is None:
        raise NotFoundError(f"schema {name!r} v{found.version} has no topic {body.topic!r}")
    report = evaluate_sample(program, body.payload)
    return reply(SchemaTestReport.model_validate(report))


_TAG = "schemas"
_SCHEMA = {"name": pp.SCHEMA_NAME}  # the path's parameters (their kinds: schema and check)

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/schemas", handler=list_schemas, tag=_TAG,
          summary="The caller's schemas by name", query=SchemaQuery, response=SchemaPage),
    Route(method="GET", path="/v1/schemas/{name}", handler=get_schema, tag=_TAG,
          summary="One version of a schema with its parameters", query=SchemaVersionQuery,
          response=SchemaVersion, path_types=_SCHEMA,
          not_found="no such schema, or no such version of it"),
    Route(method="POST", path="/v1/schemas/{name}/test", handler=test_schema, tag=_TAG,
          summary="Run a sample through validate, mutate and derive", body=SchemaTestRequest,
          response=SchemaTestReport, path_types=_SCHEMA,
          not_found="no such schema, or no such version or topic of it", errors=(422,)),
)  # fmt: skip
