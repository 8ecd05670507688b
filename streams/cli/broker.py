"""``tideway broker config``: the nats-server side of device identity, for a deployment.

Writes (or keeps) one nkey seed per Tideway process, the auth service's keys and the issuer
key under ``--keys``, and prints the ``accounts`` / ``authorization`` blocks that make
nats-server enforce them (docs/security.md, docs/deploy.md). Run it again with the same
directory to get the same configuration: existing keys are never replaced.
"""

from __future__ import annotations

from pathlib import Path

import typer

from streams.cli.output import console
from streams.config import load_settings

broker_app = typer.Typer(help="Configure nats-server for device credentials.",
                         no_args_is_help=True)


@broker_app.command("config")
def config(
    keys: Path = typer.Option(..., "--keys", help="Directory for the seed files "
                              "(created, mode 0700; existing seeds are kept)."),
    out: Path | None = typer.Option(None, "--out", help="Write the configuration here "
                                    "(for an `include`) instead of printing it."),
) -> None:
    """Make the keys and print nats-server's accounts and auth-callout configuration."""
    from streams.identity.broker import ensure_keys, server_config
    from streams.names import Names

    settings = load_settings()
    found = ensure_keys(keys)
    text = server_config(found, Names(namespace=settings.namespace))
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text)
    console.print(f"wrote {out}; seeds in {keys} (one per process: give each only its own)")
