"""The options and small helpers every ``tideway`` command shares: one definition each.

``--json`` and ``--tenant`` mean the same on every command that takes them, so they are
declared here once; a command names the option rather than spelling it again. Two wordings
of ``--tenant``'s help exist (the registry's commands say "the default_tenant setting"): both
are kept as they were, because help texts are part of the command line's interface.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer

from streams.adapters import postgres
from streams.config import load_settings
from streams.errors import UsageError

T = TypeVar("T")

JSON_OPTION: Any = typer.Option(False, "--json", help="Print JSON.")
"""``--json``: print JSON for scripts instead of tables (:mod:`streams.cli.output`)."""

TENANT_OPTION: Any = typer.Option(None, "--tenant", help="Tenant (default: default_tenant).")
"""``--tenant`` of the session and simulation commands (resolve it with :func:`tenant_name`)."""

TENANT_HELP = "Tenant (default: the default_tenant setting)."
TENANT_SETTING_OPTION: Any = typer.Option(None, "--tenant", help=TENANT_HELP)
"""``--tenant`` of the registry's commands (schemas, devices, credentials)."""

ONLY_TENANT_OPTION: Any = typer.Option(None, "--tenant", help="Only this tenant.")
"""``--tenant`` as a filter: no tenant means every tenant."""

METRICS_PORT_OPTION: Any = typer.Option(
    None, "--metrics-port", min=0, max=65535,
    help="Port of the probes listener (/metrics, /livez, /readyz); default: "
         "TIDEWAY_OBSERVABILITY__METRICS_PORT; 0: any free port.",
)  # fmt: skip
"""``--metrics-port`` of every process command."""


def tenant_name(tenant: str | None) -> str:
    """The tenant a command acts for: ``--tenant``, else the ``default_tenant`` setting."""
    return tenant or load_settings().default_tenant


def parse_id(value: str, what: str | None = None) -> uuid.UUID:
    """An id given on the command line (``UsageError`` "not a run id: 'x'" when it is not)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        kind = f"a {what} id" if what else "an id"
        raise UsageError(f"not {kind}: {value!r}") from None


def run_with_connection(work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(conn)`` on a connection to the configured Postgres."""

    async def main() -> T:
        conn = await postgres.connect(load_settings().postgres())
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(main())


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def age_seconds(value: str) -> float | None:
    """An age like ``90s``, ``15m``, ``2h`` or ``7d`` in seconds (``None``: not one)."""
    if value[:-1].isdigit() and value[-1:] in _AGE_UNITS:
        return float(int(value[:-1]) * _AGE_UNITS[value[-1]])
    return None
