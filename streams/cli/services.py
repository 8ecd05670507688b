"""The table of services ``tideway up`` and ``tideway demo`` print: where each one is, and whether
Tideway started it (embedded) or was told where it is (configured)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from streams.config import Settings


def console_url(settings: Settings) -> str:
    """Where the web console is (``tideway api`` serves it at ``/``)."""
    return f"http://{settings.api.host}:{settings.api.port}/"


def services_table(
    services: dict[str, str], settings: Settings, *, metrics: str | None = None
) -> Table:
    """One row per service: its (masked) address and whether it was started here
    (``metrics``: the probes listener's address, when there is one)."""
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
    table.add_row("console", console_url(settings), "tideway")
    if metrics is not None:
        table.add_row("metrics (/metrics, /livez, /readyz)", metrics, "tideway")
    return table
