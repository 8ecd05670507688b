"""``tideway devices credentials issue | rotate | revoke | list``: the secrets devices connect with.

A device connects to NATS (or to nats-server's MQTT listener) with the user name
``<tenant>.<device>`` and a secret Tideway issued as the password. ``issue`` and ``rotate`` print
the secret this once - Postgres keeps only its hash, so a lost secret is replaced by a rotation,
never shown again; ``list`` shows key ids and states, never a secret. The functions are
``streams.identity.credentials``, the ones the HTTP API calls.
"""

from __future__ import annotations

from typing import Any

import typer

from streams.cli.options import (
    JSON_OPTION,
    TENANT_SETTING_OPTION,
    run_with_connection,
    tenant_name,
)
from streams.cli.output import console, print_json, print_rows
from streams.identity import credentials

COLUMNS = ("key_id", "device", "state", "created_at", "revoked_at")


def _show_secret(issued: credentials.IssuedCredential, *, as_json: bool) -> None:
    if as_json:
        print_json(issued.as_dict())
        return
    console.print(f"issued credential {issued.key_id} for device {issued.device} "
                  f"(tenant {issued.tenant})")
    if issued.retired:
        console.print(f"retired: {', '.join(issued.retired)}")
    # Plain text and never wrapped: the secret must be copyable as printed.
    plain: dict[str, Any] = {"markup": False, "highlight": False, "soft_wrap": True}
    console.print(f"username  {issued.username}", **plain)
    console.print(f"secret    {issued.secret}", **plain)
    console.print("The secret is shown only this once and cannot be shown again (Tideway keeps "
                  "only its hash): store it now.", style="bold")
    console.print(f"Connect with it as the password - NATS: user {issued.username}, password "
                  f"<secret>; MQTT: username {issued.username}, password <secret>.", **plain)


credentials_app = typer.Typer(
    help="NATS/MQTT credentials of devices: issue, rotate, revoke, list.", no_args_is_help=True
)


@credentials_app.command("issue")
def issue(device: str = typer.Argument(..., help="Device id."),
          tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Issue a new credential (the device's others stay valid); prints its secret once."""
    owner = tenant_name(tenant)
    _show_secret(run_with_connection(lambda conn: credentials.issue(conn, owner, device)),
                 as_json=as_json)


@credentials_app.command("rotate")
def rotate(device: str = typer.Argument(..., help="Device id."),
           tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Issue a new credential and retire all the others at once; prints its secret once."""
    owner = tenant_name(tenant)
    _show_secret(run_with_connection(lambda conn: credentials.rotate(conn, owner, device)),
                 as_json=as_json)


@credentials_app.command("revoke")
def revoke(device: str = typer.Argument(..., help="Device id."),
           key: str | None = typer.Option(None, "--key", help="Only the credential with "
                                          "this key id (default: all of them)."),
           tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Retire one credential of the device (--key), or every valid one."""
    owner = tenant_name(tenant)
    retired = run_with_connection(
        lambda conn: credentials.revoke(conn, owner, device, key))
    if as_json:
        print_json({"device": device, "revoked": retired})
    elif retired:
        console.print(f"revoked {len(retired)} credential(s) of device {device}: "
                      f"{', '.join(retired)}")
    else:
        console.print(f"device {device} has no valid credential; nothing revoked")


@credentials_app.command("list")
def list_(device: str | None = typer.Argument(None, help="Only this device."),
          tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List credentials (key ids and states, never secrets)."""
    owner = tenant_name(tenant)
    found = run_with_connection(
        lambda conn: credentials.list_credentials(conn, owner, device))
    title = f"credentials of {device}" if device else f"credentials of {owner}"
    print_rows([c.as_dict() for c in found], columns=COLUMNS, title=title, as_json=as_json)
