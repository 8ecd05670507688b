"""Device credentials in the registry: issue, rotate, revoke, list, and check one at connect.

A credential is a secret ``twd_<key id>_<43 characters>`` (256 random bits) that a device
presents as its NATS (or MQTT) password, with the user name ``<tenant>.<device>``. The secret
is returned once, when it is issued; Postgres keeps the key id and the SHA-256 of the secret
(``device_credentials``, migration 0021). Every function takes an asyncpg connection and is
scoped to one tenant; :func:`verify` is what the auth-callout service asks on every connect.

A device may hold several valid credentials (issue a second one before retiring the first);
``rotate`` issues a new one and retires every other in one transaction, ``revoke`` retires one
or all. Retiring, deactivating or deleting the device is announced by a trigger on the channel
:data:`ACCESS_CHANNEL`, so the auth service disconnects the device within moments.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from streams.errors import NotFoundError, UsageError
from streams.identity.ids import check_device, check_tenant

__all__ = [
    "ACCESS_CHANNEL", "Credential", "IssuedCredential", "Verdict", "issue", "list_credentials",
    "parse_username", "revoke", "rotate", "username", "valid_devices", "verify", "verify_many",
]

ACCESS_CHANNEL: Final = "tideway_device_access"
"""Postgres channel the migration's triggers notify with ``<tenant>.<device>``."""

SECRET_PREFIX: Final = "twd_"
_SECRET_RE: Final = re.compile(r"^twd_([a-z2-7]{16})_([A-Za-z0-9_-]{43})$")

State = Literal["active", "revoked", "rotated"]

_DEVICE = """
SELECT d.id, d.tenant_id FROM devices d JOIN tenants t ON t.id = d.tenant_id
WHERE t.name = $1 AND d.external_id = $2
"""

_INSERT = """
INSERT INTO device_credentials (tenant_id, device_id, key_id, secret_hash)
VALUES ($1, $2, $3, $4) RETURNING created_at
"""

_RETIRE = """
UPDATE device_credentials SET revoked_at = now(), revoked_reason = $3
WHERE device_id = $1 AND revoked_at IS NULL AND ($2::text IS NULL OR key_id = $2)
RETURNING key_id
"""

_LIST = """
SELECT c.key_id, d.external_id AS device, c.created_at, c.revoked_at, c.revoked_reason
FROM device_credentials c JOIN devices d ON d.id = c.device_id
JOIN tenants t ON t.id = c.tenant_id
WHERE t.name = $1 AND ($2::text IS NULL OR d.external_id = $2)
ORDER BY d.external_id, c.created_at, c.key_id
"""

_VERIFY = """
SELECT c.key_id, c.secret_hash, c.revoked_at, t.name AS tenant, d.external_id AS device,
       d.active
FROM device_credentials c JOIN devices d ON d.id = c.device_id
JOIN tenants t ON t.id = c.tenant_id
WHERE c.key_id = ANY($1::text[])
"""

_VALID_DEVICES = """
SELECT DISTINCT t.name AS tenant, d.external_id AS device
FROM device_credentials c JOIN devices d ON d.id = c.device_id
JOIN tenants t ON t.id = c.tenant_id
WHERE c.revoked_at IS NULL AND d.active AND t.name || '.' || d.external_id = ANY($1::text[])
"""


def username(tenant: str, device: str) -> str:
    """The NATS/MQTT user name a device connects with: ``<tenant>.<device>`` (neither name
    can hold a dot, so the split is unambiguous)."""
    return f"{tenant}.{device}"


def parse_username(name: str) -> tuple[str, str] | None:
    """``(tenant, device)`` of a device user name, or ``None`` when it is not one."""
    tenant, dot, device = name.partition(".")
    if not dot:
        return None
    try:
        return check_tenant(tenant), check_device(device)
    except UsageError:
        return None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@dataclass(frozen=True)
class Credential:
    """One issued credential as the registry keeps it (never the secret)."""

    key_id: str
    device: str
    created_at: datetime
    revoked_at: datetime | None
    state: State

    @classmethod
    def from_row(cls, row: Any) -> Credential:
        state: State = row["revoked_reason"] or "active"
        return cls(key_id=row["key_id"], device=row["device"], created_at=row["created_at"],
                   revoked_at=row["revoked_at"], state=state)

    def as_dict(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "device": self.device,
                "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
                "state": self.state}


@dataclass(frozen=True)
class IssuedCredential:
    """A credential just issued: the only time its secret exists outside the device."""

    tenant: str
    device: str
    key_id: str
    secret: str
    created_at: datetime
    retired: tuple[str, ...] = ()
    """Key ids a rotation retired."""

    @property
    def username(self) -> str:
        return username(self.tenant, self.device)

    def as_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "device": self.device, "key_id": self.key_id,
                "username": self.username, "secret": self.secret,
                "created_at": self.created_at.isoformat(), "retired": list(self.retired)}


async def _device(conn: Any, tenant: str, device: str) -> tuple[Any, Any]:
    row = await conn.fetchrow(_DEVICE, check_tenant(tenant), check_device(device))
    if row is None:
        raise NotFoundError(f"device {device!r} not found for tenant {tenant!r}")
    return row["id"], row["tenant_id"]


async def _insert(conn: Any, tenant: str, device: str, device_id: Any, tenant_id: Any,
                  retired: tuple[str, ...] = ()) -> IssuedCredential:
    key_id = base64.b32encode(secrets.token_bytes(10)).decode().lower()
    secret = f"{SECRET_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    created = await conn.fetchval(_INSERT, tenant_id, device_id, key_id, _digest(secret))
    return IssuedCredential(tenant=tenant, device=device, key_id=key_id, secret=secret,
                            created_at=created, retired=retired)


async def issue(conn: Any, tenant: str, device: str) -> IssuedCredential:
    """A new credential for a registered device (its other credentials stay valid)."""
    device_id, tenant_id = await _device(conn, tenant, device)
    return await _insert(conn, tenant, device, device_id, tenant_id)


async def rotate(conn: Any, tenant: str, device: str) -> IssuedCredential:
    """A new credential, and every other one of the device retired, in one transaction."""
    async with conn.transaction():
        device_id, tenant_id = await _device(conn, tenant, device)
        retired = tuple(r["key_id"] for r in await conn.fetch(_RETIRE, device_id, None,
                                                              "rotated"))
        return await _insert(conn, tenant, device, device_id, tenant_id, retired)


async def revoke(conn: Any, tenant: str, device: str, key_id: str | None = None
                 ) -> list[str]:
    """Retire ``key_id`` (or every valid credential of the device); the key ids retired.

    A key id that is not one of the device's valid credentials is ``NotFoundError``; revoking
    all of a device that has none retires nothing and is not an error."""
    device_id, _ = await _device(conn, tenant, device)
    rows = await conn.fetch(_RETIRE, device_id, key_id, "revoked")
    if key_id is not None and not rows:
        raise NotFoundError(f"no valid credential {key_id!r} for device {device!r}")
    return [r["key_id"] for r in rows]


async def list_credentials(conn: Any, tenant: str, device: str | None = None
                           ) -> list[Credential]:
    """The credentials ever issued to ``device`` (or to every device of ``tenant``)."""
    if device is not None:
        await _device(conn, tenant, device)
    rows = await conn.fetch(_LIST, check_tenant(tenant), device)
    return [Credential.from_row(r) for r in rows]


@dataclass(frozen=True)
class Verdict:
    """What :func:`verify` found: the device's names, or why the secret is refused."""

    tenant: str | None = None
    device: str | None = None
    refusal: str | None = None
    """A short reason for the auth service's log (never the secret)."""

    @property
    def ok(self) -> bool:
        return self.refusal is None


async def verify(conn: Any, user: str, secret: str) -> Verdict:
    """Whether ``secret`` is a valid credential of the device named by ``user``.

    Constant-time in the secret's content; the reasons are for logs and metrics, the
    connecting client only ever learns that it was refused."""
    (verdict,) = await verify_many(conn, [(user, secret)])
    return verdict


async def verify_many(conn: Any, logins: list[tuple[str, str]]) -> list[Verdict]:
    """:func:`verify` of each ``(user, secret)``, with one query for all of them (the auth
    service's lookups while many devices connect at once)."""
    keys = [_SECRET_RE.match(secret) for _, secret in logins]
    wanted = sorted({m.group(1) for m in keys if m is not None})
    rows = {r["key_id"]: r for r in await conn.fetch(_VERIFY, wanted)} if wanted else {}
    return [_check(rows.get(m.group(1)), user, secret) if m is not None
            else Verdict(refusal="malformed" if secret else "no_credentials")
            for m, (user, secret) in zip(keys, logins, strict=True)]


def _check(row: Any, user: str, secret: str) -> Verdict:
    if row is None:
        # Compare anyway, so an unknown key id costs what a known one does.
        hmac.compare_digest(_digest(secret), b"\0" * 32)
        return Verdict(refusal="unknown")
    if not hmac.compare_digest(_digest(secret), bytes(row["secret_hash"])):
        return Verdict(refusal="wrong_secret")
    if user != username(row["tenant"], row["device"]):
        return Verdict(refusal="wrong_user")
    if row["revoked_at"] is not None:
        return Verdict(refusal="revoked")
    if not row["active"]:
        return Verdict(refusal="inactive")
    return Verdict(tenant=row["tenant"], device=row["device"])


async def valid_devices(conn: Any, users: list[str]) -> set[str]:
    """Those of ``users`` (``<tenant>.<device>``) that still have a valid credential and an
    active device: the revocation sweep disconnects the others."""
    rows = await conn.fetch(_VALID_DEVICES, users)
    return {username(r["tenant"], r["device"]) for r in rows}
