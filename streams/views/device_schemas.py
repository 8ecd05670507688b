"""A tenant's device schemas as the API's models (``tideway schema list|show``,
``GET /v1/schemas``, ``GET /v1/schemas/{name}``).

``list_schemas`` answers :class:`~schemas.api.SchemaSummary` rows, newest version each;
``show_schema`` one stored :class:`~schemas.api.SchemaVersion` with its parameters (its ``id``,
``tenant`` and ``topic_ids`` are operator-only: the CLI's). ``programs`` compiles a stored
version back into what the pipeline runs, for ``POST /v1/schemas/{name}/test``.
"""

from __future__ import annotations

import uuid
from typing import Any

from schemas.api import SchemaSummary, SchemaVersion
from stages.ingest.program import compile_schema
from stages.ingest.topic_program import TopicProgram
from streams.adapters.postgres import Conn
from streams.errors import NotFoundError
from streams.registry import known_tenant

__all__ = ["list_schemas", "programs", "schema_parameters", "show_schema"]

_LIST_SCHEMAS = """
SELECT s.name, count(v.id) AS versions, max(v.version) AS latest_version,
       (array_agg(v.content_hash ORDER BY v.version DESC))[1] AS content_hash,
       max(v.created_at) AS updated_at,
       (SELECT count(*) FROM devices d JOIN device_schema_versions dv ON dv.id = d.schema_version_id
        WHERE dv.schema_id = s.id) AS devices
FROM device_schemas s JOIN device_schema_versions v ON v.schema_id = s.id
WHERE s.tenant_id = $1 AND ($2::text IS NULL OR s.name > $2)
GROUP BY s.id, s.name ORDER BY s.name
LIMIT $3
"""  # $2: the last name of the previous page (keyset paging); $3 NULL: no limit

_SCHEMA_VERSION = """
SELECT v.id, s.name, v.version, v.content_hash, v.source_text, v.spec, v.created_at,
       (SELECT array_agg(version ORDER BY version) FROM device_schema_versions
        WHERE schema_id = s.id) AS versions,
       (SELECT count(*) FROM devices d WHERE d.schema_version_id = v.id) AS devices
FROM device_schemas s JOIN device_schema_versions v ON v.schema_id = s.id
WHERE s.tenant_id = $1 AND s.name = $2 AND v.version = coalesce($3, (
    SELECT max(version) FROM device_schema_versions WHERE schema_id = s.id))
"""

_VERSION_TOPICS = "SELECT id, name FROM schema_topics WHERE schema_version_id = $1"

_PARAMETERS = """
SELECT t.name AS topic, p.* FROM schema_parameters p JOIN schema_topics t ON t.id = p.topic_id
WHERE t.schema_version_id = $1 ORDER BY t.name, p.position
"""


async def list_schemas(conn: Conn, tenant: str, *, after: str | None = None,
                       limit: int | None = None) -> list[SchemaSummary]:
    """Every schema of ``tenant`` with its newest version, by name (``limit`` of them named
    after ``after`` when given)."""
    rows = await conn.fetch(_LIST_SCHEMAS, await known_tenant(conn, tenant), after, limit)
    return [SchemaSummary.model_validate(dict(row)) for row in rows]


async def show_schema(conn: Conn, tenant: str, name: str, version: int | None = None
                      ) -> SchemaVersion:
    """Version ``version`` (default: the newest) of schema ``name``, with its parameters."""
    row = await conn.fetchrow(_SCHEMA_VERSION, await known_tenant(conn, tenant), name, version)
    if row is None:
        what = f"schema {name!r}" + (f" version {version}" if version is not None else "")
        raise NotFoundError(f"{what} not found for tenant {tenant!r}")
    topics = await conn.fetch(_VERSION_TOPICS, row["id"])
    return SchemaVersion.model_validate({
        **dict(row), "tenant": tenant, "topic_ids": {t["name"]: t["id"] for t in topics},
        "parameters": await schema_parameters(conn, row["id"]),
    })


async def schema_parameters(conn: Conn, version_id: uuid.UUID) -> list[dict[str, Any]]:
    """The stored parameter rows of a version, by topic and position (for display)."""
    rows = await conn.fetch(_PARAMETERS, version_id)
    return [{k: v for k, v in dict(row).items() if k not in ("id", "topic_id")} for row in rows]


def programs(version: SchemaVersion) -> dict[str, TopicProgram]:
    """``version`` compiled into one program per topic."""
    return compile_schema(version.schema_file(), filename=f"{version.name} v{version.version}")
