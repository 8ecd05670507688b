"""The API metrics middleware on an in-process aiohttp app."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.observability.http_metrics import metrics_middleware
from streams.observability.metrics import Metrics


async def _run(id_: str) -> web.Response:
    return web.json_response({"id": id_})


async def test_requests_are_counted_by_route_template_method_and_status() -> None:
    metrics = Metrics(process=False)

    async def show(request: web.Request) -> web.Response:
        if request.match_info["run_id"] == "missing":
            raise web.HTTPNotFound()
        return await _run(request.match_info["run_id"])

    async def crash(request: web.Request) -> web.Response:
        raise RuntimeError("bug")

    app = web.Application(middlewares=[metrics_middleware(metrics)])
    app.router.add_get("/v1/runs/{run_id}", show)
    app.router.add_post("/v1/crash", crash)
    async with TestClient(TestServer(app)) as client:
        for run_id in ("a", "b", "c", "missing"):
            await client.get(f"/v1/runs/{run_id}")
        await client.get("/no/such/path/123")
        await client.post("/v1/crash")
        await client.request("PROPFIND", "/v1/runs/x")

    text = generate_latest(metrics.registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text) for s in f.samples
    }
    requests = {k[1]: v for k, v in samples.items() if k[0] == "tideway_api_requests_total"}
    assert requests == {
        (("method", "GET"), ("route", "/v1/runs/{run_id}"), ("status", "200")): 3,
        (("method", "GET"), ("route", "/v1/runs/{run_id}"), ("status", "404")): 1,
        (("method", "GET"), ("route", "unmatched"), ("status", "404")): 1,
        (("method", "POST"), ("route", "/v1/crash"), ("status", "500")): 1,
        (("method", "other"), ("route", "unmatched"), ("status", "405")): 1,
    }
    count = samples[("tideway_api_request_duration_seconds_count",
                     (("method", "GET"), ("route", "/v1/runs/{run_id}")))]
    assert count == 4
