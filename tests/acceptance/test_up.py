"""``tideway up`` in an empty directory: every address it starts or serves is in services.json.

The broker it starts is secured: an MQTT client without credentials is refused, a device
registered and given a credential from a second terminal is let in.

The README says a second terminal finds the running system through ``.tideway/services.json``;
that includes the embedded nats-server's MQTT listener (on a port chosen at random) and the
HTTP API and the probes listener (``metrics``), not only the four service URLs. The file goes
away when ``up`` stops.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.acceptance.test_demo import _clean_env

pytestmark = pytest.mark.slow

mqtt = pytest.importorskip("paho.mqtt.client")

TIDEWAY = [sys.executable, "-m", "streams.cli.main"]


def _wait_for(path: Path, proc: subprocess.Popen[str], within: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if path.exists():
            try:
                found: dict[str, Any] = json.loads(path.read_text())
                return found
            except ValueError:
                pass  # caught mid-write
        time.sleep(0.3)
    raise AssertionError(f"{path} did not appear within {within} s")


def _healthz(api_url: str, within: float = 120) -> int:
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(f"{api_url}/v1/healthz", timeout=5) as answer:
                return int(answer.status)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _ready(address: str, within: float = 60) -> int:
    """``/readyz`` until it answers 200 (every component connected), or its last status."""
    deadline = time.monotonic() + within
    status = 0
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{address}/readyz", timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            status = error.code
        time.sleep(0.5)
    return status


def _mqtt_connack(url: str, *, user: str | None = None, password: str | None = None) -> int:
    """The CONNACK reason code the MQTT listener answers (0: accepted; 135: not authorized,
    MQTT 3.1.1's 5 as paho 2 reports it; -1: no answer)."""
    parts = urlsplit(url)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tideway-up-test")
    if user is not None:
        client.username_pw_set(user, password)
    codes: list[int] = []
    client.on_connect = lambda _c, _u, _f, reason, _p=None: codes.append(int(reason.value))
    client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=10)
    client.loop_start()
    try:
        deadline = time.monotonic() + 10
        while not codes and time.monotonic() < deadline:
            time.sleep(0.05)
        return codes[0] if codes else -1
    finally:
        client.loop_stop()
        client.disconnect()


def _cli(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    """A command in a second terminal (it finds the running system through services.json)."""
    done = subprocess.run([*TIDEWAY, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_up_lists_every_address_it_starts_or_serves(tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    proc = subprocess.Popen(
        [*TIDEWAY, "up"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    runtime = tmp_path / ".tideway" / "services.json"
    try:
        found = _wait_for(runtime, proc)
        assert {"nats_url", "postgres_dsn", "redis_url", "clickhouse_dsn"} <= set(found)
        assert found["mqtt_url"].startswith("mqtt://127.0.0.1:")
        assert found["api_url"] == f"http://127.0.0.1:{env['TIDEWAY_API__PORT']}"
        # The addresses are real: the MQTT listener refuses a client without credentials
        # (the broker is secured by default) and accepts a registered device with the
        # credential a second terminal issued for it; the API answers.
        assert _mqtt_connack(found["mqtt_url"]) == 135
        _cli(tmp_path, env, "devices", "add", "ws-001", "--tenant", "acme")
        issued = json.loads(_cli(tmp_path, env, "devices", "credentials", "issue", "ws-001",
                                 "--tenant", "acme", "--json"))
        assert issued["username"] == "acme.ws-001"
        assert _mqtt_connack(found["mqtt_url"], user=issued["username"],
                             password=issued["secret"]) == 0
        assert _mqtt_connack(found["mqtt_url"], user=issued["username"],
                             password=issued["secret"][:-1] + "x") == 135
        assert _healthz(found["api_url"]) == 200
        # One probes listener serves every component of the one process.
        metrics: dict[str, str] = found["metrics"]
        assert set(metrics) == {"auth", "ingest", "intake", "worker", "api"}
        assert len(set(metrics.values())) == 1
        with urllib.request.urlopen(f"{metrics['ingest']}/metrics", timeout=10) as answer:
            assert answer.status == 200
            assert b"tideway_ingest_batches_total" in answer.read()
        assert _ready(metrics["worker"]) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert not runtime.exists()
