"""The ``tideway`` command: one typer app; each area registers its own commands.

Areas live in their own modules (``processes``, ``schema``, ``devices``, ``telemetry``,
``sessions``, ``runs``...) and expose ``register(app)``; this module only assembles them and turns
Tideway's own errors into a one-line message and exit code 1 (``streams.cli.exit_codes``).
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
    epilog="Exit codes: 0 done, 1 error, 2 bad usage, 3 the command ran and reports a failure.",
)

# Each module exposes ``register(app: typer.Typer) -> None``. The order is the order of --help.
_AREAS = (
    "streams.cli.processes",
    "streams.cli.config_cmd",
    "streams.cli.schema",
    "streams.cli.devices",
    "streams.cli.broker",
    "streams.cli.telemetry",
    "streams.cli.sessions",
    "streams.cli.runs",
    "streams.cli.retention",
)

for _name in _AREAS:
    importlib.import_module(_name).register(app)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"tideway {version('tideway')}")
        raise typer.Exit()


@app.callback()
def _root(
    _: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Options of ``tideway`` itself, before the command."""


def main() -> None:
    """Entry point that reports Tideway errors without a traceback."""
    try:
        app()
    except TidewayError as exc:
        from streams.cli.output import fail

        fail(exc.describe())


if __name__ == "__main__":
    main()
