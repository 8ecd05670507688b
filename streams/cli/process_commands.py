"""The process commands: ``up``, ``demo``, ``ingest``, ``intake``, ``worker``, ``api``, ``auth``.

Each of them runs one long-lived part of the system (``up`` and ``demo`` run all of them in one
loop, :func:`streams.system.system`). What each process does is wired once, in
:mod:`streams.processes`, which ``up`` runs too. They start and stop the same way, through
:func:`run_process`: the settings are read once, logging is set up once
(:func:`streams.observability.logs.configure_logging`), the probes listener (``/metrics``,
``/livez``, ``/readyz`` on ``--metrics-port``) is started before the components and stopped
after them, and SIGINT/SIGTERM only set a ``stop`` event — the process then drains its
in-flight work and returns. The commands differ only in the process they hand it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import IO, Literal, TypeVar

import typer

from streams import processes
from streams.cli.options import METRICS_PORT_OPTION
from streams.cli.output import console
from streams.config import Settings, load_settings
from streams.errors import UsageError
from streams.observability.logs import configure_logging
from streams.observability.process import ProcessObservability
from streams.observability.tracing import configure_tracing

T = TypeVar("T")

DEMO_LOG = "demo.log"
"""Where ``tideway demo`` writes its log lines (under ``data_dir``): not over its live view."""

ProcessMain = Callable[[Settings, asyncio.Event, ProcessObservability | None], Awaitable[T]]
"""What a process runs: the settings, the event that asks it to drain and stop, and the
process's observability (``None`` when the command starts no probes listener)."""

def run_process(
    main: ProcessMain[T],
    *,
    settings: Settings | None = None,
    log: Literal["stderr", "file"] = "stderr",
    signals: bool = True,
    components: Sequence[str] = (),
    metrics_port: int | None = None,
) -> T:
    """Run ``main(settings, stop, observability)`` to the end in a new event loop.

    ``settings`` defaults to :func:`streams.config.load_settings` (which finds a running
    ``tideway up``); ``up`` and ``demo`` pass their own because they start that system rather
    than join it. ``log="file"`` writes the log to ``data_dir/demo.log`` instead of standard
    error (``demo`` draws a live view that log lines would tear). ``signals=False`` leaves
    ``stop`` to ``main``: :func:`streams.system.system` installs the handlers itself and
    removes them when it ends. ``components`` names what the process runs: when given, one
    probes listener serves them all (on ``metrics_port``, default from the settings) and
    ``/readyz`` fails until each of them has connected.
    """
    # Imported here: streams.system brings alembic, which every other command can do without.
    from streams.system import stop_on_signals

    resolved = settings if settings is not None else load_settings()

    async def run() -> T:
        stop = stop_on_signals() if signals else asyncio.Event()
        if not components:
            return await main(resolved, stop, None)
        async with ProcessObservability(
            resolved.observability, components=components, port=metrics_port
        ) as observability:
            return await main(resolved, stop, observability)

    # Traces only when the OTEL_* environment asks (docs/operating.md#traces).
    configure_tracing(f"tideway-{components[0]}" if len(components) == 1 else "tideway")
    with _logging(resolved, log):
        if resolved.nats.open_broker and components:
            logging.getLogger("streams").warning(
                "nats.open_broker is set: devices may connect to NATS without credentials and "
                "publish as any device (a migration window only: docs/security.md)")
        return asyncio.run(run())


@contextlib.contextmanager
def _logging(settings: Settings, target: Literal["stderr", "file"]) -> Iterator[None]:
    if target == "stderr":
        configure_logging(settings)
        yield
        return
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    stream: IO[str]
    with (settings.data_dir / DEMO_LOG).open("a", encoding="utf-8") as stream:
        configure_logging(settings, stream=stream)
        try:
            yield
        finally:
            configure_logging(settings.model_copy(update={"log_level": "CRITICAL"}))


def up(metrics_port: int | None = METRICS_PORT_OPTION) -> None:
    """Run the whole system (starting any unconfigured service) until Ctrl-C."""
    from streams.cli.services import console_url, services_table
    from streams.system import component_names, system

    async def main(
        settings: Settings, _: asyncio.Event, observability: ProcessObservability | None
    ) -> None:
        metrics = observability.address if observability is not None else None
        async with system(settings, hooks=observability, metrics=metrics) as (
            resolved, started, stop,
        ):
            console.print(services_table(started.services, resolved, metrics=metrics))
            console.print(
                f"console: {console_url(resolved)} (sign in with a key from `tideway api-keys "
                f"create NAME --tenant {resolved.default_tenant}`, run in a second terminal)",
                markup=False,
            )
            console.print("[bold green]tideway is up[/] — Ctrl-C to stop")
            await stop.wait()
        console.print("stopped")

    settings = Settings()
    run_process(main, settings=settings, signals=False, components=component_names(settings),
                metrics_port=metrics_port)


def demo(
    duration: float = typer.Option(20.0, help="Seconds of simulated fleet traffic."),
    devices: int = typer.Option(25, help="Simulated devices."),
    rate: float = typer.Option(500.0, help="Envelopes per second, whole fleet."),
    laps: int = typer.Option(3, help="Laps in the demo session file."),
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Run the system for a while, feed it a fleet and a session file, print a summary."""
    from streams.cli.demo import run_demo
    from streams.system import component_names

    async def main(
        settings: Settings, _: asyncio.Event, observability: ProcessObservability | None
    ) -> int:
        return await run_demo(
            settings, duration=duration, devices=devices, rate=rate, laps=laps,
            observability=observability,
            metrics=observability.address if observability is not None else None,
        )

    settings = Settings()
    raise typer.Exit(run_process(main, settings=settings, log="file", signals=False,
                                 components=component_names(settings),
                                 metrics_port=metrics_port))


def auth(metrics_port: int | None = METRICS_PORT_OPTION) -> None:
    """Answer nats-server's authorization requests: check device credentials against the
    registry, disconnect devices whose credential is revoked (docs/security.md)."""
    run_process(processes.auth, components=("auth",), metrics_port=metrics_port)


def ingest(
    concurrency: int = typer.Option(
        None, "--concurrency", min=1, max=64, help="Batches in flight (default: settings)."
    ),
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Consume telemetry envelopes until SIGTERM/Ctrl-C (drains in-flight batches)."""
    run_process(
        lambda settings, stop, obs: processes.ingest(settings, stop, obs, concurrency=concurrency),
        components=("ingest",), metrics_port=metrics_port,
    )  # fmt: skip


def intake(metrics_port: int | None = METRICS_PORT_OPTION) -> None:
    """Run the session intake consumer (SESSIONS stream → runs and jobs) until Ctrl-C."""
    run_process(processes.intake, components=("intake",), metrics_port=metrics_port)


def worker(
    pool: str | None = typer.Option(
        None, "--pool", help="Only jobs of this pool (io, cpu, heavy)."
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, max=256, help="Jobs at a time (default: worker.concurrency)."
    ),
    executors_kind: str = typer.Option(
        "sessions",
        "--executors",
        help="sessions: the real session stages; placeholder: pass-through jobs that exercise"
        " the engine on its own.",
    ),
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Run batch jobs until interrupted (SIGINT/SIGTERM finish running jobs, then exit)."""
    if executors_kind not in {"sessions", "placeholder"}:
        raise UsageError("--executors must be sessions or placeholder")
    kind: processes.Executors = "placeholder" if executors_kind == "placeholder" else "sessions"
    run_process(
        lambda settings, stop, obs: processes.worker(
            settings, stop, obs, pool=pool, concurrency=concurrency, executors=kind),
        components=("worker",), metrics_port=metrics_port,
    )  # fmt: skip


def api(metrics_port: int | None = METRICS_PORT_OPTION) -> None:
    """Serve the HTTP API (TIDEWAY_API__HOST / TIDEWAY_API__PORT) until Ctrl-C."""

    async def main(
        settings: Settings, stop: asyncio.Event, observability: ProcessObservability | None
    ) -> None:
        console.print(f"serving http://{settings.api.host}:{settings.api.port}")
        await processes.api(settings, stop, observability)

    run_process(main, components=("api",), metrics_port=metrics_port)
