"""``tideway api`` with its process's observability: request ids, the access log, metrics,
readiness of Postgres and NATS."""

from __future__ import annotations

import asyncio
import io
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from streams.api.server import run_api
from streams.config import Settings
from streams.observability.process import ProcessObservability
from tests.integration.json_logs import captured_json_logs
from tests.integration.observability.conftest import fast, get_json


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    with captured_json_logs("INFO") as out:
        yield out


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[tuple[str, ProcessObservability]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    served = settings.model_copy(
        update={"api": settings.api.model_copy(update={"host": "127.0.0.1", "port": port})}
    )
    stop = asyncio.Event()
    async with ProcessObservability(fast(), components=("api",)) as obs:
        task = asyncio.create_task(run_api(served, stop=stop, hooks=obs))
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:
                for _ in range(100):
                    try:
                        async with http.get(f"{base}/v1/healthz"):
                            break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)
            yield base, obs
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)


def _access(out: io.StringIO) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "streams.api.access"]


async def test_request_ids_are_kept_or_made_returned_and_logged(
    api: tuple[str, ProcessObservability], json_log: io.StringIO
) -> None:
    base, obs = api
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/v1/healthz", headers={"X-Request-Id": "req-42.a"}) as r:
            assert r.status == 200 and r.headers["X-Request-Id"] == "req-42.a"
        bad = "no spaces or <tags> please"
        async with http.get(f"{base}/v1/runs/{'0' * 8}", headers={"X-Request-Id": bad}) as r:
            assert r.status == 401
            made = r.headers["X-Request-Id"]
            assert made != bad and len(made) == 32
        async with http.get(f"{base}/nowhere?lat=52.07123") as r:
            assert r.status == 404 and r.headers["X-Request-Id"]

    access = _access(json_log)
    assert [(a["request_id"], a["route"], a["status"]) for a in access] == [
        ("req-42.a", "/v1/healthz", 200), (made, "/v1/runs/{id}", 401),
        (access[2]["request_id"], "unmatched", 404),
    ]
    assert all("52.07123" not in orjson.dumps(a).decode() for a in access)  # no query logged
    registry = obs.metrics.registry
    assert registry.get_sample_value("tideway_api_requests_total", {
        "route": "/v1/healthz", "method": "GET", "status": "200"}) >= 1
    assert registry.get_sample_value("tideway_api_requests_total", {
        "route": "/v1/runs/{id}", "method": "GET", "status": "401"}) == 1


async def test_readiness_checks_postgres_and_nats(api: tuple[str, ProcessObservability]) -> None:
    _, obs = api
    status, body = await asyncio.to_thread(get_json, f"{obs.address}/readyz")
    assert status == 200, body
    assert {c["name"] for c in body["checks"]} == {"startup", "postgres", "nats"}
