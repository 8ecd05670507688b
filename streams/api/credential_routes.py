"""A device's NATS/MQTT credentials: list, issue, rotate, revoke (``tideway devices credentials``).

The functions are the registry's (``streams.identity.credentials``), the ones the CLI calls. A
device is named by its id within the caller's tenant, so another tenant's device is "not found"
exactly as a device that does not exist is, and a key id is looked up only among the named
device's credentials.

The secret exists outside the device only in the answer that issues it (Postgres keeps its
hash), so that answer is marked ``Cache-Control: no-store``: no browser or proxy cache may keep
a copy of it.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from schemas.api import (
    DeviceCredential,
    DeviceCredentialPage,
    IssuedDeviceCredential,
    RevokedDeviceCredentials,
)
from streams.api import path_params as pp
from streams.api.bodies import reply
from streams.api.context import caller_of, context_of
from streams.api.device_routes import DEVICE, NO_DEVICE
from streams.api.inputs import path_text
from streams.api.openapi import Route
from streams.identity import credentials

__all__ = [
    "NO_STORE",
    "ROUTES",
    "issue_credential",
    "list_credentials",
    "revoke_credential",
    "revoke_credentials",
    "rotate_credentials",
]

NO_STORE: Final = {
    "Cache-Control": {
        "description": "`no-store`: the answer holds a secret no cache may keep.",
        "schema": {"type": "string", "const": "no-store"},
    }
}
"""The OpenAPI description of the header every answer carrying a secret has."""


def _secret(issued: credentials.IssuedCredential) -> web.Response:
    resp = reply(IssuedDeviceCredential.model_validate(issued.as_dict()), status=201)
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _revoked(device: str, key_ids: list[str]) -> web.Response:
    return reply(RevokedDeviceCredentials(device=device, revoked=key_ids))


async def list_credentials(request: web.Request) -> web.Response:
    caller, device = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        found = await credentials.list_credentials(conn, caller.tenant, device)
    items = [DeviceCredential.model_validate(c.as_dict()) for c in found]
    return reply(DeviceCredentialPage(items=items, next=None))


async def issue_credential(request: web.Request) -> web.Response:
    """A new credential; the device's others stay valid (rotate retires them)."""
    caller, device = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        issued = await credentials.issue(conn, caller.tenant, device)
    return _secret(issued)


async def rotate_credentials(request: web.Request) -> web.Response:
    caller, device = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        issued = await credentials.rotate(conn, caller.tenant, device)
    return _secret(issued)


async def revoke_credential(request: web.Request) -> web.Response:
    caller, device = caller_of(request), path_text(request, "device")
    key_id = path_text(request, "key_id")
    async with context_of(request).pool.acquire() as conn:
        retired = await credentials.revoke(conn, caller.tenant, device, key_id)
    return _revoked(device, retired)


async def revoke_credentials(request: web.Request) -> web.Response:
    caller, device = caller_of(request), path_text(request, "device")
    async with context_of(request).pool.acquire() as conn:
        retired = await credentials.revoke(conn, caller.tenant, device)
    return _revoked(device, retired)


_TAG = "devices"
_HELP = (
    "The device connects to NATS (or its MQTT listener) with `username` as the user name and "
    "`secret` as the password. The secret is shown once: Tideway keeps only its SHA-256, so a "
    "lost secret is replaced (rotate), never recovered."
)

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/devices/{device}/credentials", handler=list_credentials,
          tag=_TAG, summary="The device's NATS/MQTT credentials, oldest first (never a "
                            "secret)", response=DeviceCredentialPage, path_types=DEVICE,
          not_found=NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/credentials",
          handler=issue_credential, tag=_TAG,
          summary="Issue a credential (its secret is in this answer only)", status=201,
          response=IssuedDeviceCredential, headers=NO_STORE, path_types=DEVICE,
          not_found=NO_DEVICE, description=_HELP),
    Route(method="POST", path="/v1/devices/{device}/credentials/rotate",
          handler=rotate_credentials, tag=_TAG,
          summary="Issue a credential and retire every other of the device, at once",
          status=201, response=IssuedDeviceCredential, headers=NO_STORE,
          path_types=DEVICE, not_found=NO_DEVICE, description=_HELP),
    Route(method="POST", path="/v1/devices/{device}/credentials/revoke",
          handler=revoke_credentials, tag=_TAG,
          summary="Retire every valid credential of the device",
          response=RevokedDeviceCredentials, path_types=DEVICE, not_found=NO_DEVICE),
    Route(method="DELETE", path="/v1/devices/{device}/credentials/{key_id}",
          handler=revoke_credential, tag=_TAG,
          summary="Retire one valid credential (404 when it is not one)",
          response=RevokedDeviceCredentials,
          path_types={"device": pp.DEVICE, "key_id": pp.KEY_ID},
          not_found="no such device, or no valid credential of it with this key id"),
)  # fmt: skip
