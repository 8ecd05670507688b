"""``tideway devices add | list | show | activate | deactivate | assign | credentials``.

Devices belong to a tenant (``--tenant``, default the ``default_tenant`` setting) and are named
by the id they use in subjects (``telemetry.<tenant>.<device>.<topic>``). An inactive device's
envelopes are recorded but skip mutate/derive/publish (spec 001); a device without a schema
version cannot be evaluated. ``credentials`` (:mod:`streams.cli.credentials`) issues the
secrets devices connect to NATS with.
"""

from __future__ import annotations

import typer

from schemas.api import Device, operator_fields
from streams import registry
from streams.cli.credentials import credentials_app
from streams.cli.options import (
    JSON_OPTION,
    TENANT_SETTING_OPTION,
    run_with_connection,
    tenant_name,
)
from streams.cli.output import console, print_json, print_record, print_rows
from streams.views import devices as device_views

COLUMNS = ("external_id", "name", "active", "schema", "schema_version", "updated_at")


def _show(device: Device, *, as_json: bool) -> None:
    data = operator_fields(device)
    if as_json:
        print_json(data)
    else:
        print_record(data, title=f"device {device.external_id}")


devices_app = typer.Typer(help="Register devices, assign schemas, issue credentials.",
                          no_args_is_help=True)


@devices_app.command("add")
def add(device: str = typer.Argument(..., help="Device id used in subjects."),
        name: str | None = typer.Option(None, help="Human-readable name."),
        schema: str | None = typer.Option(None, help="Assign this schema (newest version)."),
        version: int | None = typer.Option(None, help="Assign this version of --schema."),
        inactive: bool = typer.Option(False, "--inactive", help="Register as inactive."),
        tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Register a new device."""
    owner = tenant_name(tenant)
    added = run_with_connection(lambda conn: registry.add_device(
        conn, owner, device, name=name, schema=schema, version=version, active=not inactive))
    if as_json:
        print_json(operator_fields(added))
        return
    on = added.schema_name
    assigned = f", schema {on} v{added.schema_version}" if on else ""
    state = "active" if added.active else "inactive"
    console.print(f"added device {added.external_id} to tenant {owner} ({state}{assigned})")


@devices_app.command("list")
def list_(schema: str | None = typer.Option(None, help="Only devices on this schema."),
          active: bool | None = typer.Option(None, "--active/--inactive",
                                             help="Only active (or inactive) devices."),
          tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List the tenant's devices."""
    owner = tenant_name(tenant)
    found = run_with_connection(
        lambda conn: device_views.list_devices(conn, owner, schema=schema, active=active))
    print_rows([operator_fields(d) for d in found], columns=COLUMNS,
               title=f"devices of {owner}", as_json=as_json)


@devices_app.command("show")
def show(device: str = typer.Argument(...), tenant: str | None = TENANT_SETTING_OPTION,
         as_json: bool = JSON_OPTION) -> None:
    """Show one device."""
    owner = tenant_name(tenant)
    _show(run_with_connection(lambda conn: device_views.show_device(conn, owner, device)),
          as_json=as_json)


def _set_active(device: str, tenant: str | None, active: bool) -> None:
    owner = tenant_name(tenant)
    found, changed = run_with_connection(
        lambda conn: registry.set_active(conn, owner, device, active))
    word = "activated" if active else "deactivated"
    already = "active" if active else "inactive"
    console.print(f"device {found.external_id} {word}" if changed
                  else f"device {found.external_id} was already {already}; nothing changed")


@devices_app.command("activate")
def activate(device: str = typer.Argument(...),
             tenant: str | None = TENANT_SETTING_OPTION) -> None:
    """Let the device's envelopes be processed and published."""
    _set_active(device, tenant, True)


@devices_app.command("deactivate")
def deactivate(device: str = typer.Argument(...),
               tenant: str | None = TENANT_SETTING_OPTION) -> None:
    """Record the device's envelopes but skip mutate/derive/publish."""
    _set_active(device, tenant, False)


@devices_app.command("assign")
def assign(device: str = typer.Argument(...),
           schema: str = typer.Argument(..., help="Schema name."),
           version: int | None = typer.Option(None, "--version", help="Default: newest."),
           tenant: str | None = TENANT_SETTING_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Assign a schema version to a device."""
    owner = tenant_name(tenant)
    updated = run_with_connection(
        lambda conn: registry.assign_schema(conn, owner, device, schema, version))
    if as_json:
        print_json(operator_fields(updated))
        return
    console.print(f"device {updated.external_id} now uses {updated.schema_name} "
                  f"v{updated.schema_version}")

devices_app.add_typer(credentials_app, name="credentials")
