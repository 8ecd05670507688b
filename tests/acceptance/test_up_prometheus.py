"""A real Prometheus scrapes ``tideway up`` and agrees with Postgres (issue 13).

``tideway up`` runs in an empty directory; a real ``prometheus`` (the Debian package) scrapes
the addresses ``services.json`` lists under ``metrics``. ``tideway simulate`` feeds a fleet and
``tideway sessions upload --wait`` a synthetic session; then Prometheus' HTTP API must say what
Postgres says: as many completed envelopes as ``ingestion_messages`` has completed rows, a job
duration series for every job type the run executed, and one upload-to-publish observation.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.acceptance.test_demo import _clean_env
from tests.acceptance.test_up import TIDEWAY, _ready, _wait_for
from tests.integration.observability.conftest import get_json
from tests.prometheus_server import running_prometheus

pytestmark = pytest.mark.slow


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    env = _clean_env(tmp_path)
    proc = subprocess.Popen(
        [*TIDEWAY, "up"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        yield _wait_for(tmp_path / ".tideway" / "services.json", proc), env
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err[-3000:]


@pytest.fixture
def prometheus(up: tuple[dict[str, Any], dict[str, str]], tmp_path: Path) -> Iterator[str]:
    found, _ = up
    # One scrape job per listener: ``up`` serves every component from one address, which
    # must not be scraped (and counted) four times.
    targets = sorted({urllib.parse.urlsplit(a).netloc for a in found["metrics"].values()})
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "tideway-up",
                            "static_configs": [{"targets": targets}]}],
    }
    with running_prometheus(config, tmp_path / "prometheus") as url:
        yield url


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    try:
        status, body = get_json(
            f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    except OSError:
        return []  # not listening yet
    assert status == 200, body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _scalar(prometheus: str, expr: str) -> float | None:
    result = _query(prometheus, expr)
    return float(result[0]["value"][1]) if result else None


def _eventually(check: Callable[[], Any], within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1.0)
    raise AssertionError(f"{what}: not within {within} s (last: {last!r})")


def _tideway(cwd: Path, env: dict[str, str], *args: str, timeout: float = 240) -> str:
    done = subprocess.run([*TIDEWAY, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


async def _postgres(dsn: str) -> tuple[int, set[str]]:
    conn = await asyncpg.connect(dsn)
    try:
        completed = await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE status = 'completed'")
        types = {r["job_type"] for r in await conn.fetch(
            "SELECT DISTINCT j.job_type FROM job_attempts a JOIN jobs j ON j.id = a.job_id")}
    finally:
        await conn.close()
    return int(completed), types


def test_prometheus_scraping_up_agrees_with_postgres(
    up: tuple[dict[str, Any], dict[str, str]], prometheus: str, tmp_path: Path
) -> None:
    found, env = up
    assert _ready(found["metrics"]["ingest"]) == 200
    _eventually(lambda: _scalar(prometheus, 'up{job="tideway-up"}') == 1, 60,
                "Prometheus scraping up")

    _tideway(tmp_path, env, "simulate", "--devices", "5", "--rate", "100", "--duration", "3",
             "--seed", "7")
    session = tmp_path / "race.csv"
    _tideway(tmp_path, env, "sessions", "synth", "--laps", "2", "--imu-hz", "50",
             "--gnss-hz", "10", "--format", "csv", "--out", str(session))
    _tideway(tmp_path, env, "sessions", "upload", str(session), "--device", "car-7", "--wait")

    dsn = found["postgres_dsn"]

    def counters_agree() -> tuple[int, float] | None:
        completed, _ = asyncio.run(_postgres(dsn))
        counted = _scalar(
            prometheus, 'sum(tideway_ingest_envelopes_total{status="completed"})')
        return (completed, counted) if completed and counted == completed else None

    completed, _ = _eventually(counters_agree, 60, "completed envelopes: Prometheus = Postgres")
    assert completed > 0

    _, job_types = asyncio.run(_postgres(dsn))
    assert {"parse_raw", "publish_session"} <= job_types

    def histogram_types() -> set[str] | None:
        series = _query(prometheus, "sum by (job_type) (tideway_job_duration_seconds_count)")
        seen = {s["metric"]["job_type"] for s in series}
        return seen if seen >= job_types else None

    assert _eventually(histogram_types, 60, "a job duration series per job type") == job_types
    assert _eventually(
        lambda: _scalar(prometheus, "sum(tideway_session_upload_to_publish_seconds_count)"),
        60, "upload-to-publish observed") == 1
