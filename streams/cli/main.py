"""The ``tideway`` command: one typer app assembled from the areas' own.

Each area is a module with a module-level typer app of its own (``process_commands`` holds plain
commands): ``schema_app``, ``devices_app``, ``sessions_app``, ``runs_app``... This module only
imports and mounts them, and turns Tideway's own errors into a one-line message and exit code
1 (``streams.cli.exit_codes``). The order below is the order of ``--help``: typer lists the
plain commands first, then the groups, each in the order they are added.
"""

from __future__ import annotations

from typing import Any

import typer

from streams.cli import process_commands, telemetry
from streams.cli.api_keys import api_keys_app
from streams.cli.broker import broker_app
from streams.cli.config_cmd import config_app, migrate
from streams.cli.devices import devices_app
from streams.cli.retention import retention_app
from streams.cli.runs import runs_app
from streams.cli.schema import schema_app
from streams.cli.sessions import sessions_app
from streams.cli.tracks import tracks_app
from streams.errors import TidewayError

app = typer.Typer(
    name="tideway",
    help="Telemetry ingestion for IoT fleets: stream envelopes and whole-session files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    epilog="Exit codes: 0 done, 1 error, 2 bad usage, 3 the command ran and reports a failure.",
)

app.command("up")(process_commands.up)
app.command("demo")(process_commands.demo)
app.command("ingest")(process_commands.ingest)
app.command("intake")(process_commands.intake)
app.command("worker")(process_commands.worker)
app.command("api")(process_commands.api)
app.command("auth")(process_commands.auth)
app.command("migrate")(migrate)
app.command("simulate")(telemetry.simulate_cmd)
app.command("replay")(telemetry.replay_cmd)

app.add_typer(config_app, name="config")
app.add_typer(schema_app, name="schema")
app.add_typer(devices_app, name="devices")
app.add_typer(broker_app, name="broker")
app.add_typer(telemetry.streams_app, name="streams")
app.add_typer(telemetry.dlq_app, name="dlq")
app.add_typer(telemetry.messages_app, name="messages")
app.add_typer(sessions_app, name="sessions")
app.add_typer(api_keys_app, name="api-keys")
app.add_typer(runs_app, name="runs")
app.add_typer(tracks_app, name="tracks")
app.add_typer(retention_app, name="retention")


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


def _hide_flag_types(command: Any) -> None:
    """No ``<bool>`` beside a flag in ``--help``: a flag takes no value.

    typer's rich help prints every option's type, a flag's too (``--json <bool>``), which
    reads as if the flag wanted a value. An empty metavar is what its help shows instead;
    the help option itself is made on demand, so it is made here to be given one too."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    help_option = command.get_help_option(typer.Context(command))
    if help_option is not None:
        help_option.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _hide_flag_types(sub)


def main() -> None:
    """Entry point that reports Tideway errors without a traceback."""
    command = typer.main.get_command(app)
    _hide_flag_types(command)
    try:
        command(prog_name="tideway")
    except TidewayError as exc:
        from streams.cli.output import fail

        fail(exc.describe())


if __name__ == "__main__":
    main()
