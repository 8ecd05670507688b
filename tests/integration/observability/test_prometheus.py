"""A real Prometheus server scrapes a probes listener; its HTTP API returns what we counted."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from streams.observability.metrics import Metrics
from streams.observability.probes import ProbeServer
from tests.integration.observability.conftest import fast, get_json
from tests.prometheus_server import running_prometheus
from tests.shared_data import REPO_ROOT

ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARDS = sorted((REPO_ROOT / "deploy" / "grafana").glob("*.json"))


@dataclass(frozen=True, kw_only=True)
class Prometheus:
    url: str

    def query(self, expr: str) -> tuple[int, Any]:
        return get_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))


@pytest.fixture
async def probes() -> AsyncIterator[ProbeServer]:
    async with ProbeServer(fast(), Metrics()) as server:
        yield server


@pytest.fixture
def prometheus(probes: ProbeServer, tmp_path: Path) -> Iterator[Prometheus]:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{
            "job_name": "tideway-test",
            "static_configs": [{"targets": [f"127.0.0.1:{probes.port}"]}],
        }],
    }
    with running_prometheus(config, tmp_path / "prometheus") as url:
        yield Prometheus(url=url)


async def _until(prometheus: Prometheus, expr: str, expected: float) -> list[Any]:
    last: Any = None
    for _ in range(300):  # up to 30 s: start-up plus a couple of 1 s scrapes
        try:
            status, body = await asyncio.to_thread(prometheus.query, expr)
        except OSError:  # not listening yet
            status, body = 0, None
        if status == 200:
            last = body["data"]["result"]
            if last and float(last[0]["value"][1]) == expected:
                return list(last)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{expr} never became {expected}; last answer {last}")


async def test_prometheus_scrapes_the_counters_we_increment(
    probes: ProbeServer, prometheus: Prometheus
) -> None:
    probes.metrics.batches.inc(7)
    probes.metrics.envelopes.labels("completed", "").inc(8000)
    probes.metrics.end_to_end.observe_many([0.02, 0.03, 0.2])

    (sample,) = await _until(prometheus, "tideway_ingest_batches_total", 7)
    assert sample["metric"]["job"] == "tideway-test"
    assert sample["metric"]["instance"] == f"127.0.0.1:{probes.port}"
    await _until(prometheus, 'tideway_ingest_envelopes_total{status="completed"}', 8000)
    await _until(prometheus, "tideway_ingest_end_to_end_latency_seconds_count", 3)

    probes.metrics.batches.inc(5)  # and the next scrape sees the change
    await _until(prometheus, "tideway_ingest_batches_total", 12)
    await _until(prometheus, 'up{job="tideway-test"}', 1)


async def test_prometheus_loads_the_rules_and_runs_every_dashboard_query(
    probes: ProbeServer, prometheus: Prometheus
) -> None:
    await _until(prometheus, 'up{job="tideway-test"}', 1)
    status, body = await asyncio.to_thread(get_json, prometheus.url + "/api/v1/rules")
    assert status == 200
    loaded = {r["name"] for g in body["data"]["groups"] for r in g["rules"]}
    defined = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
               for r in g["rules"]}
    assert loaded == defined
    unhealthy = [(r["name"], r.get("lastError")) for g in body["data"]["groups"]
                 for r in g["rules"] if r.get("health") == "err"]
    assert not unhealthy

    for path in DASHBOARDS:
        for panel in orjson.loads(path.read_bytes())["panels"]:
            for target in panel.get("targets", []):
                # Grafana fills $__rate_interval in; Prometheus needs a real range.
                expr = target["expr"].replace("$__rate_interval", "1m")
                status, answer = await asyncio.to_thread(prometheus.query, expr)
                assert (status, answer["status"]) == (200, "success"), (path.name, expr, answer)
