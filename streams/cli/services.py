"""``tideway up`` (run everything until Ctrl-C) and ``tideway demo`` (run it, feed it, report)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import typer
from rich.table import Table

from streams.cli.output import console
from streams.config import Settings, load_settings


def services_table(services: dict[str, str], settings: Settings) -> Table:
    table = Table(title="Tideway services")
    table.add_column("service")
    table.add_column("where")
    table.add_column("source")
    masked: dict[str, Any] = settings.masked()
    for name, key in (
        ("nats", "nats_url"),
        ("postgres", "postgres_dsn"),
        ("redis", "redis_url"),
        ("clickhouse", "clickhouse_dsn"),
    ):
        source = "embedded" if name in services else "configured"
        table.add_row(name, str(masked[key]), source)
    if "mqtt" in services:
        table.add_row("mqtt", services["mqtt"], "embedded")
    table.add_row(
        "objects", settings.objects(), "embedded" if settings.object_store is None else "configured"
    )
    table.add_row("http api", f"http://{settings.api.host}:{settings.api.port}", "tideway")
    return table


def register(app: typer.Typer) -> None:
    """Add ``up`` and ``demo`` to ``app``."""

    @app.command("up")
    def up() -> None:
        """Run the whole system (starting any unconfigured service) until Ctrl-C."""
        logging.basicConfig(level=Settings().log_level, format="%(asctime)s %(name)s %(message)s")
        asyncio.run(_up(Settings()))

    @app.command("demo")
    def demo(
        duration: float = typer.Option(20.0, help="Seconds of simulated fleet traffic."),
        devices: int = typer.Option(25, help="Simulated devices."),
        rate: float = typer.Option(500.0, help="Envelopes per second, whole fleet."),
        laps: int = typer.Option(3, help="Laps in the demo session file."),
    ) -> None:
        """Run the system for a while, feed it a fleet and a session file, print a summary."""
        from streams.demo import run_demo

        code = asyncio.run(
            run_demo(Settings(), duration=duration, devices=devices, rate=rate, laps=laps)
        )
        raise typer.Exit(code)

    @app.command("intake")
    def intake() -> None:
        """Run the session intake consumer (SESSIONS stream → runs and jobs) until Ctrl-C."""
        from streams.runtime import stop_on_signals
        from streams.sessions.intake import provision_sessions, run_intake

        async def main(settings: Settings) -> None:
            await provision_sessions(settings)
            await run_intake(settings, stop=stop_on_signals())

        asyncio.run(main(load_settings()))

    @app.command("api")
    def api() -> None:
        """Serve the HTTP API (TIDEWAY_API__HOST / TIDEWAY_API__PORT) until Ctrl-C."""
        from streams.api.server import run_api
        from streams.runtime import stop_on_signals

        async def main(settings: Settings) -> None:
            console.print(f"serving http://{settings.api.host}:{settings.api.port}")
            await run_api(settings, stop=stop_on_signals())

        asyncio.run(main(load_settings()))


async def _up(settings: Settings) -> None:
    from streams.runtime import system

    async with system(settings) as (resolved, started, stop):
        console.print(services_table(started.services, resolved))
        console.print("[bold green]tideway is up[/] — Ctrl-C to stop")
        await stop.wait()
    console.print("stopped")
