"""``tideway api-keys create | list | revoke``: the keys the HTTP API accepts, one tenant each.

``create`` prints the secret this once, and it is not shown again, with the key's id (what
``revoke`` takes); ``list`` shows every key's id, name, tenant and dates, never a secret. The
functions are ``streams.api.keys``.
"""

from __future__ import annotations

import typer

from streams.cli.options import (
    JSON_OPTION,
    TENANT_OPTION,
    parse_id,
    run_with_connection,
    tenant_name,
)
from streams.cli.output import console, print_json, print_rows

api_keys_app = typer.Typer(help="API keys for the HTTP API.", no_args_is_help=True)


@api_keys_app.command("create")
def create_key(
    name: str = typer.Argument("default", help="A label for the key."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Create an API key for the tenant; the secret is shown only once."""
    from streams.api.keys import create_api_key

    owner = tenant_name(tenant)
    key = run_with_connection(lambda conn: create_api_key(conn, tenant=owner, name=name))
    data = {"id": str(key.id), "tenant": key.tenant, "name": key.name, "key": key.secret}
    if as_json:
        print_json(data)
    else:
        console.print(f"API key {key.id} ({key.name}) for tenant {owner} (store it now, it "
                      "is not shown again):", markup=False, highlight=False)
        console.print(key.secret, markup=False, highlight=False)


@api_keys_app.command("list")
def list_keys(
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The tenant's API keys, revoked ones included (id, name, created, revoked), oldest
    first; never a secret."""
    from streams.api.keys import list_api_keys

    owner = tenant_name(tenant)
    keys = run_with_connection(lambda conn: list_api_keys(conn, tenant=owner))
    print_rows([vars(k) for k in keys], title=f"API keys of {owner}", as_json=as_json,
               columns=("id", "name", "tenant", "prefix", "created_at", "revoked_at"))


@api_keys_app.command("revoke")
def revoke_key(
    key_id: str = typer.Argument(..., help="Key id."),
    tenant: str | None = TENANT_OPTION,
) -> None:
    """Revoke an API key."""
    from streams.api.keys import revoke_api_key

    owner = tenant_name(tenant)
    run_with_connection(lambda conn: revoke_api_key(conn, tenant=owner, key_id=parse_id(key_id)))
    console.print(f"revoked {key_id}")
