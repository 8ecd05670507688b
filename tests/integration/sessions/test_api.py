"""The HTTP API: API-key auth, uploads, and every read scoped to the caller's tenant."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from aiohttp.test_utils import TestClient, TestServer

from streams.api.context import ApiContext
from streams.api.keys import create_api_key, revoke_api_key
from streams.api.server import build_app
from streams.config import Settings
from streams.objects import ObjectStore
from streams.sessions.progress import wait_for_run
from tests.integration.sessions.conftest import running_intake, running_system


@contextlib.asynccontextmanager
async def api_client(settings: Settings, pool: Any) -> AsyncIterator[TestClient[Any, Any]]:
    nc = await nats.connect(settings.nats())
    ctx = ApiContext(settings=settings, pool=pool, store=ObjectStore(settings.objects()), nats=nc)
    client = TestClient(TestServer(build_app(ctx)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
        await nc.close()


async def _key(pool: Any, tenant: str) -> dict[str, str]:
    async with pool.acquire() as conn:
        key = await create_api_key(conn, tenant=tenant, name="test")
    return {"Authorization": f"Bearer {key.secret}"}


async def test_upload_and_read_back_with_tenant_isolation(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    acme, globex = await _key(pool, "acme"), await _key(pool, "globex")
    data = await asyncio.to_thread(nmea_file.read_bytes)
    async with running_system(settings), api_client(settings, pool) as client:
        form = aiohttp.FormData()
        form.add_field("device", "kart-9")
        form.add_field("config", '{"skip_laps": true}')
        form.add_field("file", data, filename="lap.nmea", content_type="text/plain")
        resp = await client.post("/v1/sessions", data=form, headers=acme)
        assert resp.status == 202, await resp.text()
        receipt = await resp.json()
        assert receipt["device"] == "kart-9" and receipt["run_id"] is not None
        assert receipt["artifacts"][0]["size"] == len(data)
        final = await wait_for_run(settings, run_id=receipt["run_id"], timeout_s=60)
        assert final.status in {"succeeded", "partial"}

        run = await (await client.get(f"/v1/runs/{receipt['run_id']}", headers=acme)).json()
        assert run["status"] == final.status and run["active"] is True
        assert run["config"] == {"skip_laps": True}
        assert run["features_available"]["laps"] is False
        assert run["feature_reasons"]["laps"] == "LAPS_DISABLED"
        assert {j["name"] for j in run["jobs"]} >= {"parse_raw", "publish_session"}
        assert any(d["name"] == "gnss_L1" for d in run["datasets"])

        session = await (await client.get(receipt["links"]["session"], headers=acme)).json()
        assert session["device"] == "kart-9" and session["active_run_id"] == receipt["run_id"]
        listed = await (await client.get("/v1/sessions", headers=acme)).json()
        assert [s["id"] for s in listed["items"]] == [receipt["session_id"]]

        # Another tenant sees none of it: the same ids are simply not found.
        for path in (f"/v1/runs/{receipt['run_id']}", receipt["links"]["session"]):
            resp = await client.get(path, headers=globex)
            assert resp.status == 404
            assert (await resp.json())["code"] == "NOT_FOUND"
        empty = {"items": [], "next": None}
        assert (await (await client.get("/v1/sessions", headers=globex)).json()) == empty


async def test_auth_is_required_and_revocation_works(settings: Settings, pool: Any) -> None:
    async with api_client(settings, pool) as client:
        health = await client.get("/v1/healthz")
        assert health.status == 200
        assert (await health.json())["checks"] == {"nats": True, "postgres": True}
        assert (await client.get("/v1/sessions")).status == 401
        bad = {"X-API-Key": "tw_nothing_valid"}
        assert (await client.get("/v1/sessions", headers=bad)).status == 401
        async with pool.acquire() as conn:
            key = await create_api_key(conn, tenant="acme", name="ci")
            headers = {"X-API-Key": key.secret}
            assert (await client.get("/v1/sessions", headers=headers)).status == 200
            await revoke_api_key(conn, tenant="acme", key_id=key.id)
        assert (await client.get("/v1/sessions", headers=headers)).status == 401
        async with pool.acquire() as conn:
            stored = await conn.fetchval("SELECT key_hash FROM api_keys WHERE id = $1", key.id)
        assert key.secret not in stored  # only the hash is kept


async def test_raw_body_upload_and_usage_errors(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    headers = await _key(pool, "acme")
    data = await asyncio.to_thread(nmea_file.read_bytes)
    async with running_intake(settings), api_client(settings, pool) as client:
        resp = await client.post(
            "/v1/sessions?device=buoy-2&filename=track.nmea", data=data, headers=headers
        )
        assert resp.status == 202, await resp.text()
        body = await resp.json()
        assert body["artifacts"][0]["name"] == "track.nmea" and body["run_id"]
        for query, code in (
            ("?device=bad%20id&filename=x", "USAGE_ERROR"),
            ("?device=d&priority=high", "USAGE_ERROR"),
            ("?device=d&config=%5B1%5D", "USAGE_ERROR"),
        ):
            resp = await client.post(f"/v1/sessions{query}", data=b"x", headers=headers)
            assert resp.status == 400, query
            assert (await resp.json())["code"] == code
        resp = await client.get("/v1/runs/not-a-uuid", headers=headers)
        assert resp.status == 400


@pytest.mark.parametrize("limit", [16])
async def test_too_large_uploads_are_refused(settings: Settings, pool: Any, limit: int) -> None:
    small = settings.model_copy(
        update={"worker": settings.worker.model_copy(update={"max_artifact_bytes": limit})}
    )
    headers = await _key(pool, "acme")
    async with api_client(small, pool) as client:
        resp = await client.post("/v1/sessions?device=d", data=b"x" * 100, headers=headers)
        assert resp.status == 413
    assert ObjectStore(small.objects()).list("tmp") == []


async def test_run_api_serves_until_stopped(settings: Settings) -> None:
    import socket

    from streams.api.server import run_api

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    served = settings.model_copy(
        update={"api": settings.api.model_copy(update={"host": "127.0.0.1", "port": port})}
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_api(served, stop=stop))
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(100):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/v1/healthz") as resp:
                        assert resp.status == 200
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("the API never answered")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert task.done() and task.exception() is None
