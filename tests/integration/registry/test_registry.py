"""The registry against a real, freshly migrated Postgres (one database per test)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from schemas.device_schema import SchemaFile, parse_schema_text
from stages.ingest.program import SchemaCompileError
from streams import registry
from streams.adapters import postgres
from streams.errors import NotFoundError, UsageError
from streams.views import device_schemas, devices

SCHEMA = """\
schema: weather-station
tenant: acme
topics:
  - name: state
    parameters:
      - {name: temp_c, source: temp, type: number, required: true, min: -60, max: 80}
      - {name: battery_v, source: bat_mv, type: number, unit: V, mutate: "value / 1000"}
      - {name: temp_f, type: number, derived: "temp_c * 9 / 5 + 32"}
  - name: meta
    parameters:
      - {name: firmware, type: string}
"""

REFORMATTED = """\
tenant: acme   # same content, other layout and spelled-out defaults
schema: weather-station
topics:
- name: state
  parameters:
  - {name: temp_c, source: temp, type: number, required: true, critical: false, min: -60.0, max: 80}
  - {name: battery_v, source: bat_mv, type: number, unit: V, mutate: "value / 1000"}
  - {name: temp_f, type: number, derived: "temp_c * 9 / 5 + 32"}
- {name: meta, parameters: [{name: firmware, source: firmware, type: string}]}
"""


def parsed(text: str) -> SchemaFile:
    return parse_schema_text(text)


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[Any]:
    connection = await postgres.connect(pg_dsn)
    try:
        yield connection
    finally:
        await connection.close()


async def apply(conn: Any, text: str) -> registry.AppliedSchema:
    return await registry.apply_schema(conn, parsed(text), source_text=text)


async def test_apply_stores_version_topics_and_parameters(conn: Any) -> None:
    result = await apply(conn, SCHEMA)
    assert (result.schema, result.tenant, result.version, result.created) == (
        "weather-station", "acme", 1, True)
    assert result.content_hash == parsed(SCHEMA).content_hash()
    stored = await device_schemas.show_schema(conn, "acme", "weather-station")
    assert stored.id == result.version_id
    assert stored.source_text == SCHEMA
    assert stored.schema_file() == parsed(SCHEMA)
    assert set(stored.topic_ids) == {"state", "meta"}
    rows = await device_schemas.schema_parameters(conn, stored.id)
    assert [(r["topic"], r["name"], r["position"]) for r in rows] == [
        ("meta", "firmware", 0), ("state", "temp_c", 0), ("state", "battery_v", 1),
        ("state", "temp_f", 2)]
    battery = next(r for r in rows if r["name"] == "battery_v")
    assert (battery["source"], battery["unit"], battery["mutate"]) == ("bat_mv", "V",
                                                                       "value / 1000")
    temp_c = next(r for r in rows if r["name"] == "temp_c")
    assert (temp_c["required"], temp_c["min_value"], temp_c["max_value"]) == (True, -60.0, 80.0)


async def test_identical_content_is_a_no_op(conn: Any) -> None:
    first = await apply(conn, SCHEMA)
    again = await apply(conn, REFORMATTED)
    assert (again.created, again.version, again.version_id) == (False, 1, first.version_id)
    assert await conn.fetchval("SELECT count(*) FROM device_schema_versions") == 1
    assert await conn.fetchval("SELECT count(*) FROM schema_topics") == 2


async def test_new_content_makes_a_new_version_and_old_content_finds_its_version(conn: Any
                                                                                 ) -> None:
    await apply(conn, SCHEMA)
    second = await apply(conn, SCHEMA.replace("value / 1000", "value / 1000.0 * 1"))
    assert (second.version, second.created) == (2, True)
    back = await apply(conn, SCHEMA)
    assert (back.version, back.created, back.latest_version) == (1, False, 2)
    assert (await device_schemas.show_schema(conn, "acme", "weather-station")).version == 2
    older = await device_schemas.show_schema(conn, "acme", "weather-station", 1)
    assert older.versions == (1, 2)
    assert "value / 1000\"" in older.source_text


async def test_concurrent_applies_agree_on_one_version(pg_dsn: str) -> None:
    connections = [await postgres.connect(pg_dsn) for _ in range(4)]
    try:
        results = await asyncio.gather(*(apply(c, SCHEMA) for c in connections))
    finally:
        for c in connections:
            await c.close()
    assert {r.version for r in results} == {1}
    assert sum(r.created for r in results) == 1


async def test_a_schema_that_does_not_compile_writes_nothing(conn: Any) -> None:
    broken = SCHEMA.replace("temp_c * 9 / 5 + 32", "temp_f * 2")
    with pytest.raises(SchemaCompileError) as caught:
        await apply(conn, broken)
    assert caught.value.code == "EXPR_CYCLE"
    assert await conn.fetchval("SELECT count(*) FROM device_schemas") == 0
    assert await conn.fetchval("SELECT count(*) FROM tenants") == 0


async def test_list_and_show_are_tenant_scoped(conn: Any) -> None:
    await apply(conn, SCHEMA)
    await apply(conn, SCHEMA.replace("tenant: acme", "tenant: globex").replace(
        "weather-station", "buoy"))
    [listed] = await device_schemas.list_schemas(conn, "acme")
    assert (listed.name, listed.latest_version, listed.versions, listed.devices) == (
        "weather-station", 1, 1, 0)
    assert [s.name for s in await device_schemas.list_schemas(conn, "globex")] == ["buoy"]
    with pytest.raises(NotFoundError):
        await device_schemas.show_schema(conn, "globex", "weather-station")
    with pytest.raises(NotFoundError):
        await device_schemas.show_schema(conn, "acme", "weather-station", 7)
    with pytest.raises(NotFoundError, match="tenant 'nobody' not found"):
        await device_schemas.list_schemas(conn, "nobody")


async def test_stored_version_compiles_back_into_programs(conn: Any) -> None:
    await apply(conn, SCHEMA)
    stored = await device_schemas.show_schema(conn, "acme", "weather-station")
    programs = device_schemas.programs(stored)
    assert set(programs) == {"state", "meta"}
    assert programs["state"].derived_names == ("temp_f",)
    assert programs["state"].content_hash == stored.content_hash


async def test_device_lifecycle(conn: Any) -> None:
    await apply(conn, SCHEMA)
    added = await registry.add_device(conn, "acme", "ws-001", name="Roof")
    assert (added.active, added.schema_name, added.schema_version, added.name) == (
        True, None, None, "Roof")
    with pytest.raises(UsageError) as duplicate:
        await registry.add_device(conn, "acme", "ws-001")
    assert duplicate.value.code == "DEVICE_EXISTS"

    assigned = await registry.assign_schema(conn, "acme", "ws-001", "weather-station")
    assert (assigned.schema_name, assigned.schema_version) == ("weather-station", 1)
    assert assigned.updated_at >= added.updated_at

    device, changed = await registry.set_active(conn, "acme", "ws-001", False)
    assert (device.active, changed) == (False, True)
    device, changed = await registry.set_active(conn, "acme", "ws-001", False)
    assert (device.active, changed) == (False, False)
    device, changed = await registry.set_active(conn, "acme", "ws-001", True)
    assert (device.active, changed) == (True, True)

    await apply(conn, SCHEMA.replace("type: string", "type: string, unit: semver"))
    newest = await registry.assign_schema(conn, "acme", "ws-001", "weather-station")
    assert newest.schema_version == 2
    pinned = await registry.assign_schema(conn, "acme", "ws-001", "weather-station", 1)
    assert pinned.schema_version == 1
    shown = await devices.show_device(conn, "acme", "ws-001")
    assert shown == pinned


async def test_add_with_schema_and_list_filters(conn: Any) -> None:
    await apply(conn, SCHEMA)
    await registry.add_device(conn, "acme", "a1", schema="weather-station")
    await registry.add_device(conn, "acme", "a2", schema="weather-station", version=1,
                              active=False)
    await registry.add_device(conn, "acme", "b1")
    everything = await devices.list_devices(conn, "acme")
    assert [d.external_id for d in everything] == ["a1", "a2", "b1"]
    on_schema = await devices.list_devices(conn, "acme", schema="weather-station")
    assert [d.external_id for d in on_schema] == ["a1", "a2"]
    inactive = await devices.list_devices(conn, "acme", active=False)
    assert [d.external_id for d in inactive] == ["a2"]
    [listed] = await device_schemas.list_schemas(conn, "acme")
    assert listed.devices == 2
    with pytest.raises(NotFoundError):
        await registry.add_device(conn, "acme", "c1", schema="no-such-schema")
    with pytest.raises(UsageError):
        await registry.add_device(conn, "acme", "bad id!")


async def test_devices_are_tenant_scoped(conn: Any) -> None:
    await apply(conn, SCHEMA)
    await apply(conn, SCHEMA.replace("tenant: acme", "tenant: globex"))
    await registry.add_device(conn, "acme", "shared-name")
    await registry.add_device(conn, "globex", "shared-name", schema="weather-station")
    acme_device = await devices.show_device(conn, "acme", "shared-name")
    globex_device = await devices.show_device(conn, "globex", "shared-name")
    assert acme_device.id != globex_device.id
    assert acme_device.schema_name is None and globex_device.schema_name == "weather-station"
    # globex's version of the schema is a different row from acme's
    acme_version = (await device_schemas.show_schema(conn, "acme", "weather-station")).id
    assigned = await registry.assign_schema(conn, "acme", "shared-name", "weather-station")
    assert assigned.schema_version_id == acme_version != globex_device.schema_version_id
    with pytest.raises(NotFoundError):
        await devices.show_device(conn, "globex", "only-acme")
    with pytest.raises(NotFoundError):
        await registry.assign_schema(conn, "acme", "missing", "weather-station")
