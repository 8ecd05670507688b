"""Run every Tideway process in one event loop until asked to stop.

``tideway up`` and ``tideway demo`` use this: resolve services (starting embedded ones),
migrate, provision streams, then run the ingest consumer, the session intake, the batch
workers and the HTTP API side by side. In a production deployment each of those runs as its
own command (``tideway ingest``, ``tideway worker``...) and scales as separate pods; here they
share one process, which is also what chDB needs (one engine per process).

The process has one probes listener (``/metrics``, ``/livez``, ``/readyz``) for all of them:
its readiness is the union of every component's checks, and ``services.json`` maps each
component's name to that one address under ``metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from streams import migrate
from streams.config import RUNTIME_FILE, Settings
from streams.embedded import Started, embedded_services, quiet_platformdirs
from streams.identity.broker import ADMIN, AUTH_USER, BrokerKeys, as_user
from streams.observability.events import ProcessHooks

log = logging.getLogger(__name__)


def stop_on_signals() -> asyncio.Event:
    """An event that SIGINT and SIGTERM set (call inside the running loop).

    Every long-running command stops the same way: the signal only sets the event, and the
    component drains its in-flight work before returning.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


Run = Callable[[Settings, asyncio.Event, ProcessHooks | None], Coroutine[Any, Any, None]]


@dataclass(frozen=True, kw_only=True)
class Component:
    """One long-running part of the system."""

    name: str
    run: Run


async def prepare(settings: Settings) -> None:
    """Migrate Postgres and provision streams, buckets and ClickHouse (all idempotent)."""
    await asyncio.to_thread(migrate.upgrade, settings.postgres())
    from streams.ingest.provision import provision
    from streams.sessions.intake import provision_sessions

    for warning in await provision(settings):
        log.warning("%s", warning)
    await provision_sessions(settings)


def components(settings: Settings, keys: BrokerKeys | None = None) -> list[Component]:
    """Every process that exists, wired to ``settings``.

    ``keys``: the embedded broker's; each component then connects as its own NATS user (the
    permissions of its role, ``streams.identity.permissions``) and the auth service runs
    beside them. Without them the auth service runs only if ``auth.issuer_seed_file`` says
    this process is to answer for a broker configured elsewhere."""
    from stages.jobs.dag import DEFAULT_DAG  # the standard DAG: this is the top-level wiring
    from streams.api.server import run_api
    from streams.identity.callout import run_auth
    from streams.ingest.consumer import run_consumer
    from streams.jobs.worker import run_worker
    from streams.sessions.intake import run_intake
    from streams.sessions.stage_executors import default_executors

    async def worker(s: Settings, stop: asyncio.Event, hooks: ProcessHooks | None) -> None:
        executors = default_executors(s, DEFAULT_DAG)
        try:
            await executors.warm_up()  # start compute processes before the first job arrives
            await run_worker(
                s, dag=DEFAULT_DAG, executors=executors, pool=None,
                concurrency=s.worker.concurrency, stop=stop, hooks=hooks,
            )
        finally:
            await executors.aclose()

    found = [
        Component(name="ingest", run=lambda s, stop, h: run_consumer(s, stop=stop, hooks=h)),
        Component(name="intake", run=lambda s, stop, h: run_intake(s, stop=stop, hooks=h)),
        Component(name="worker", run=worker),
        Component(name="api", run=lambda s, stop, h: run_api(s, stop=stop, hooks=h)),
    ]
    if keys is not None or settings.auth.issuer_seed_file is not None:
        found.insert(0, Component(name="auth",
                                  run=lambda s, stop, h: run_auth(s, stop=stop, hooks=h)))
    if keys is None:
        return found
    return [replace(c, run=_as_user(c.run, keys, AUTH_USER if c.name == "auth" else c.name))
            for c in found]


def _as_user(run: Run, keys: BrokerKeys, user: str) -> Run:
    def run_as(s: Settings, stop: asyncio.Event, hooks: ProcessHooks | None
               ) -> Coroutine[Any, Any, None]:
        return run(as_user(s, keys, user), stop, hooks)

    return run_as


COMPONENTS = ("auth", "ingest", "intake", "worker", "api")
"""The names of :func:`components` with an embedded broker, in order."""


def component_names(settings: Settings) -> tuple[str, ...]:
    """The components ``up`` runs for ``settings`` (what its probes listener waits for):
    the auth service only beside a broker it starts or one it is configured to answer for."""
    if settings.nats_url is None or settings.auth.issuer_seed_file is not None:
        return COMPONENTS
    return COMPONENTS[1:]


def addresses(
    settings: Settings, started: Started, *, metrics: str | None = None
) -> dict[str, Any]:
    """Every address this system starts or serves, as ``services.json`` lists them.

    The four service URLs appear only for services started here: a configured URL may hold a
    password, and another terminal has that configuration already. The keys of the service
    URLs are settings names, so :func:`streams.config.load_settings` can fill them in.
    ``metrics`` is the probes listener's address: ``services.json`` maps every component to
    it (one process serves them all).
    """
    found: dict[str, Any] = dict(started.urls)
    if "mqtt" in started.services:
        found["mqtt_url"] = started.services["mqtt"]
    found["api_url"] = f"http://{settings.api.host}:{settings.api.port}"
    if started.nats_keys is not None:
        # The operator's key, for the commands of another terminal (streams.config); the
        # processes' own keys stay beside it under the data directory, mode 0600.
        found["nats_seed_file"] = str(started.nats_keys.seed_file(ADMIN).resolve())
    if metrics is not None:
        found["metrics"] = dict.fromkeys(component_names(settings), metrics)
    return found


@contextlib.asynccontextmanager
async def runtime_file(
    settings: Settings, started: Started, *, metrics: str | None = None
) -> AsyncIterator[Path]:
    """Write ``data_dir/services.json`` for the duration of the block, then remove it.

    It lets commands in other terminals find this system (:func:`streams.config.load_settings`)
    and tells a person where the MQTT listener and the HTTP API are. An in-process chDB engine
    stays with this process: another process that opens it gets a clear ``CLICKHOUSE_BUSY``
    error (``streams.clickhouse``); everything else works.
    """
    path = settings.data_dir.resolve() / RUNTIME_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    found = addresses(settings, started, metrics=metrics)
    path.write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2))
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


@contextlib.asynccontextmanager
async def system(
    settings: Settings, *, hooks: ProcessHooks | None = None, metrics: str | None = None
) -> AsyncIterator[tuple[Settings, Started, asyncio.Event]]:
    """Start services and every component; stop them all when the block exits.

    Yields the resolved settings, what was started, and the ``stop`` event that ends the
    components (set it, or leave the block). SIGINT/SIGTERM set it too. ``hooks`` is the
    process's observability, shared by every component; ``metrics`` its listener's address
    (for ``services.json``).
    """
    quiet_platformdirs()
    async with (
        embedded_services(settings) as (resolved, started),
        runtime_file(resolved, started, metrics=metrics),
    ):
        await prepare(resolved)
        stop = stop_on_signals()
        loop = asyncio.get_running_loop()
        tasks: dict[asyncio.Task[None], str] = {
            asyncio.create_task(c.run(resolved, stop, hooks), name=c.name): c.name
            for c in components(resolved, started.nats_keys)
        }
        watcher = asyncio.create_task(_stop_on_crash(tasks, stop))
        try:
            yield resolved, started, stop
        finally:
            stop.set()
            done, pending = await asyncio.wait(tasks, timeout=30)
            for task in pending:
                task.cancel()
            watcher.cancel()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]


async def _stop_on_crash(tasks: dict[asyncio.Task[None], str], stop: asyncio.Event) -> None:
    """A component that dies takes the system down with it, loudly, rather than limping on."""
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        if not stop.is_set():
            exc = None if task.cancelled() else task.exception()
            log.error("component %s stopped unexpectedly: %r", tasks[task], exc)
    stop.set()
