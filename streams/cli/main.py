"""The ``tideway`` command: one typer app; each area registers its own commands.

Areas live in their own modules (``schema``, ``devices``, ``pipeline``, ``sessions``, ``runs``,
``services``...) and expose ``register(app)``; this module only assembles them and turns
Tideway's own errors into a one-line message and a non-zero exit code.
"""

from __future__ import annotations

import importlib

import typer

from streams.errors import TidewayError

app = typer.Typer(
    name="tideway",
    help="Telemetry ingestion for IoT fleets: stream envelopes and whole-session files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Each module exposes ``register(app: typer.Typer) -> None``. The order is the order of --help.
_AREAS = (
    "streams.cli.services",
    "streams.cli.config_cmd",
    "streams.cli.schema",
    "streams.cli.devices",
    "streams.cli.pipeline",
    "streams.cli.sessions",
    "streams.cli.runs",
)

for _name in _AREAS:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point that reports Tideway errors without a traceback."""
    try:
        app()
    except TidewayError as exc:
        from streams.cli.output import fail

        fail(f"{exc} ({exc.code})")


if __name__ == "__main__":
    main()
