"""``/v1/tracks``: a tenant's saved tracks through the API (add, list, show, delete), the
library beside them, and the database's own wall between tenants (row-level security)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from schemas.run_config import StartFinish, TrackConfig
from streams.adapters import postgres
from streams.api.tenant_db import TenantPool
from streams.config import Settings
from streams.sessions.saved_tracks import add_track, list_tracks
from tests.integration.api.conftest import api_client, key_headers
from tests.integration.foundation.test_roles import as_role

_LINE = {"lat1": 52.0712, "lon1": -1.0161, "lat2": 52.0714, "lon2": -1.0161}


async def test_saved_tracks_through_the_api(settings: Settings, pool: Any) -> None:
    acme, globex = await key_headers(pool, "acme"), await key_headers(pool, "globex")
    async with api_client(settings, pool) as client:
        made = await client.post("/v1/tracks", headers=acme, json={
            "name": "Hill climb", "start_finish": _LINE, "finish": {**_LINE, "lat1": 52.08},
            "sectors": [_LINE]})
        assert made.status == 201, await made.text()
        body = await made.json()
        assert body["source"] == "saved" and body["finish"]["lat1"] == 52.08
        assert body["created_by"].startswith("api:") and body["key"] is None

        mine = await (await client.get("/v1/tracks", headers=acme)).json()
        assert [t["name"] for t in mine["items"]] == ["Hill climb"] and mine["next"] is None
        everything = await (await client.get("/v1/tracks?include=all", headers=acme)).json()
        library = [t for t in everything["items"] if t["source"] == "library"]
        assert {t["key"] for t in library} >= {"gb-1948", "be-1925"}
        assert all("bacinger/f1-circuits" in t["reference"] for t in library)
        theirs = await (await client.get("/v1/tracks", headers=globex)).json()
        assert theirs["items"] == []

        one = await client.get("/v1/tracks/Hill%20climb", headers=acme)
        assert one.status == 200 and (await one.json())["sectors"] == [_LINE]
        sil = await (await client.get("/v1/tracks/gb-1948", headers=globex)).json()
        assert sil["name"] == "Silverstone Circuit" and sil["source"] == "library"
        hidden = await client.get("/v1/tracks/Hill%20climb", headers=globex)
        assert hidden.status == 404 and (await hidden.json())["detail"] == "no such track"

        # Neither lines nor a session; both; a bad line; an unknown session; a bad name.
        for bad in ({"name": "x"}, {"name": "x", "start_finish": _LINE,
                                    "from_session": "00000000-0000-0000-0000-000000000001"},
                    {"name": "x", "start_finish": {**_LINE, "lat1": 91}},
                    {"name": "/x", "start_finish": _LINE}):
            resp = await client.post("/v1/tracks", headers=acme, json=bad)
            assert resp.status == 400, (bad, await resp.text())
        unknown = await client.post("/v1/tracks", headers=acme, json={
            "name": "x", "from_session": "00000000-0000-0000-0000-000000000001"})
        assert unknown.status == 404, await unknown.text()

        # globex cannot delete acme's (404), acme can; a library track is nobody's to delete.
        assert (await client.delete("/v1/tracks/Hill%20climb", headers=globex)).status == 404
        gone = await client.delete("/v1/tracks/Hill%20climb", headers=acme)
        assert gone.status == 200 and (await gone.json())["name"] == "Hill climb"
        assert (await client.delete("/v1/tracks/gb-1948", headers=acme)).status == 404
        assert (await (await client.get("/v1/tracks", headers=acme)).json())["items"] == []


async def test_row_level_security_keeps_saved_tracks_to_their_tenant(
        pg_dsn: str, pg_pool: Any) -> None:
    line = StartFinish(**_LINE)
    async with pg_pool.acquire() as conn:
        await conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex')")
        tenants = dict(await conn.fetch("SELECT name, id FROM tenants"))
        await add_track(conn, tenant="globex", track=TrackConfig(name="G", start_finish=line))
    api = await postgres.create_pool(as_role(pg_dsn, "api"), postgres.API_POOL)
    try:
        async with TenantPool(api, tenants["acme"], "acme").acquire() as conn:
            await add_track(conn, tenant="acme", track=TrackConfig(name="A", start_finish=line))
            # No tenant filter at all: the policy's rows only.
            assert [r["name"] for r in await conn.fetch("SELECT name FROM saved_tracks")] == ["A"]
            assert [t.name for t in await list_tracks(conn, "globex")] == []
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    "INSERT INTO saved_tracks (tenant_id, name, start_finish, created_by)"
                    " VALUES ($1, 'planted', '{}'::jsonb, 'x')", tenants["globex"])
            assert await conn.fetchval("DELETE FROM saved_tracks RETURNING name") == "A"
    finally:
        await api.close()
    async with pg_pool.acquire() as conn:
        assert [t.name for t in await list_tracks(conn, "globex")] == ["G"]  # untouched
