"""A device's credentials over the API: issue, rotate and revoke round trip with the secret in
one answer only (``no-store``, never listed, only its hash in Postgres), and another tenant's
device answered byte for byte as a device that does not exist."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from streams import registry
from streams.config import Settings
from tests.integration.api.conftest import Client, api_client, key_headers

SECRET = re.compile(r"^twd_([a-z2-7]{16})_[A-Za-z0-9_-]{43}$")


async def _register(pool: Any, tenant: str, device: str) -> None:
    async with pool.acquire() as conn:
        await registry.add_device(conn, tenant, device)


async def _issued(client: Client, path: str, headers: dict[str, str]) -> Any:
    resp = await client.post(path, headers=headers)
    assert resp.status == 201, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    return await resp.json()


async def _states(client: Client, device: str, headers: dict[str, str]) -> dict[str, str]:
    resp = await client.get(f"/v1/devices/{device}/credentials", headers=headers)
    assert resp.status == 200, await resp.text()
    page = await resp.json()
    assert page["next"] is None
    return {c["key_id"]: c["state"] for c in page["items"]}


async def test_issue_rotate_revoke_with_the_secret_shown_once(
    settings: Settings, pool: Any
) -> None:
    await _register(pool, "acme", "ws-1")
    acme = await key_headers(pool, "acme")
    base = "/v1/devices/ws-1/credentials"
    async with api_client(settings, pool) as client:
        assert await _states(client, "ws-1", acme) == {}
        first = await _issued(client, base, acme)
        match = SECRET.match(first["secret"])
        assert match and match.group(1) == first["key_id"]
        assert (first["tenant"], first["device"], first["username"]) == ("acme", "ws-1",
                                                                        "acme.ws-1")
        assert first["retired"] == []

        # The list never carries the secret, and no answer but the issuing one does.
        listed = await client.get(base, headers=acme)
        assert first["secret"] not in await listed.text()
        assert "no-store" not in listed.headers.get("Cache-Control", "")
        assert await _states(client, "ws-1", acme) == {first["key_id"]: "active"}
        # Postgres holds the key id and the secret's SHA-256, nothing of the secret itself.
        async with pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT c::text AS text, secret_hash FROM device_credentials c WHERE key_id = $1",
                first["key_id"])  # fmt: skip
        assert bytes(row["secret_hash"]) == hashlib.sha256(first["secret"].encode()).digest()
        random_part = first["secret"].rsplit("_", 1)[1]
        assert first["secret"] not in row["text"] and random_part not in row["text"]

        # A second credential leaves the first valid; a rotation retires both at once.
        second = await _issued(client, base, acme)
        assert await _states(client, "ws-1", acme) == {
            first["key_id"]: "active", second["key_id"]: "active"}  # fmt: skip
        rotated = await _issued(client, f"{base}/rotate", acme)
        assert sorted(rotated["retired"]) == sorted([first["key_id"], second["key_id"]])
        assert rotated["secret"] not in (first["secret"], second["secret"])
        assert await _states(client, "ws-1", acme) == {
            first["key_id"]: "rotated", second["key_id"]: "rotated", rotated["key_id"]: "active"}

        # Revoke one by key id: a second time (or an unknown key) is not found.
        resp = await client.delete(f"{base}/{rotated['key_id']}", headers=acme)
        assert resp.status == 200
        assert await resp.json() == {"device": "ws-1", "revoked": [rotated["key_id"]]}
        for key_id in (rotated["key_id"], first["key_id"], "aaaaaaaaaaaaaaaa"):
            resp = await client.delete(f"{base}/{key_id}", headers=acme)
            assert resp.status == 404, key_id
            assert (await resp.json())["code"] == "NOT_FOUND"
        # Not a key id's shape (16 of a-z and 2-7): a 400, as the document says, not a lookup.
        resp = await client.delete(f"{base}/rotate", headers=acme)
        assert resp.status == 400 and (await resp.json())["code"] == "USAGE_ERROR"
        assert await _states(client, "ws-1", acme) == {
            first["key_id"]: "rotated", second["key_id"]: "rotated", rotated["key_id"]: "revoked"}

        # Revoke them all; with none left valid that is nothing, not an error.
        third, fourth = await _issued(client, base, acme), await _issued(client, base, acme)
        resp = await client.post(f"{base}/revoke", headers=acme)
        assert resp.status == 200
        revoked = await resp.json()
        assert sorted(revoked["revoked"]) == sorted([third["key_id"], fourth["key_id"]])
        resp = await client.post(f"{base}/revoke", headers=acme)
        assert await resp.json() == {"device": "ws-1", "revoked": []}
        assert "active" not in (await _states(client, "ws-1", acme)).values()

        # An unknown device is not found on every route; a name no device can have is a 400.
        for method, path in _routes("nope", "aaaaaaaaaaaaaaaa"):
            resp = await client.request(method, path, headers=acme)
            assert resp.status == 404, (method, path)
            assert (await resp.json())["code"] == "NOT_FOUND"
        resp = await client.post("/v1/devices/no.dots/credentials", headers=acme)
        assert resp.status == 400


def _routes(device: str, key_id: str) -> list[tuple[str, str]]:
    base = f"/v1/devices/{device}/credentials"
    return [("GET", base), ("POST", base), ("POST", f"{base}/rotate"),
            ("POST", f"{base}/revoke"), ("DELETE", f"{base}/{key_id}")]  # fmt: skip


async def test_another_tenants_device_is_answered_as_an_unknown_one(
    settings: Settings, pool: Any
) -> None:
    acme, globex = await key_headers(pool, "acme"), await key_headers(pool, "globex")
    placeholder = "aaaaaaaaaaaaaaaa"
    async with api_client(settings, pool) as client:

        async def answers(key_id: str) -> list[tuple[int, str, bytes]]:
            out = []
            for method, path in _routes("ws-7", key_id):
                # One request id, so the bodies (which carry it) can be compared byte for byte.
                headers = {**globex, "X-Request-Id": "isolation"}
                resp = await client.request(method, path, headers=headers)
                out.append((resp.status, resp.content_type, await resp.read()))
            return out

        # Before ws-7 exists anywhere, then once it is acme's with a valid credential.
        unknown = await answers(placeholder)
        assert {status for status, _, _ in unknown} == {404}
        await _register(pool, "acme", "ws-7")
        issued = await _issued(client, "/v1/devices/ws-7/credentials", acme)
        assert await answers(issued["key_id"]) == unknown
        assert await answers(placeholder) == unknown
        # Nothing globex asked for touched acme's credential.
        assert await _states(client, "ws-7", acme) == {issued["key_id"]: "active"}
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM device_credentials") == 1
