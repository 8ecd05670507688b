"""Helpers for the probes tests: fast thresholds and a plain HTTP GET usable from any thread."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import orjson

from streams.config import ObservabilitySettings


def fast(**overrides: Any) -> ObservabilitySettings:
    """Probe settings with thresholds short enough for a test, on a free port."""
    values: dict[str, Any] = {
        "metrics_port": 0, "loop_blocked_s": 0.4, "heartbeat_stale_s": 30.0,
        "check_timeout_s": 1.0, "sample_interval_s": 60.0, **overrides,
    }
    return ObservabilitySettings(**values)


def get(url: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
    """A blocking GET (so it can run in a thread while the test's event loop is blocked)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def get_json(url: str, *, timeout: float = 5.0) -> tuple[int, Any]:
    status, body = get(url, timeout=timeout)
    return status, orjson.loads(body)

# A Redis the test starts and stops itself (the ingest outage tests' fixture, shared).
from tests.integration.ingest.test_publish_failure import private_redis  # noqa: E402, F401
