"""API keys: created for a tenant, shown once, stored only as a sha256 hash.

A key looks like ``tw_<prefix>_<secret>``; ``prefix`` (8 characters) is stored in clear so an
operator can tell keys apart, the whole key is stored as ``sha256(key)`` in ``api_keys``. A
request authenticates by presenting the key (``Authorization: Bearer <key>`` or
``X-API-Key: <key>``); the hash is looked up and the key's tenant scopes every query.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from streams.errors import NotFoundError
from streams.registry import ensure_tenant

__all__ = [
    "Caller",
    "CreatedKey",
    "KeyInfo",
    "authenticate",
    "create_api_key",
    "hash_key",
    "key_label",
    "list_api_keys",
    "revoke_api_key",
]

_PREFIX = "tw_"


@dataclass(frozen=True, kw_only=True)
class CreatedKey:
    """A new key; ``secret`` is the only copy of the key and is never stored."""

    id: uuid.UUID
    tenant: str
    name: str
    prefix: str
    secret: str


@dataclass(frozen=True, kw_only=True)
class KeyInfo:
    """A stored key as ``api-keys list`` shows it: never its secret, only its clear prefix."""

    id: uuid.UUID
    name: str
    tenant: str
    prefix: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who a request is: the tenant its key belongs to."""

    tenant_id: uuid.UUID
    tenant: str
    key_id: uuid.UUID


def hash_key(secret: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(secret.encode()).hexdigest()


async def create_api_key(conn: Any, *, tenant: str, name: str) -> CreatedKey:
    """Create a key for ``tenant`` (created if new) and return it with its secret."""
    tid = await ensure_tenant(conn, tenant)
    prefix = secrets.token_hex(4)
    secret = f"{_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key_id: uuid.UUID = await conn.fetchval(
        "INSERT INTO api_keys (tenant_id, name, key_hash, prefix) VALUES ($1, $2, $3, $4)"
        " RETURNING id",
        tid,
        name,
        hash_key(secret),
        prefix,
    )
    return CreatedKey(id=key_id, tenant=tenant, name=name, prefix=prefix, secret=secret)


async def authenticate(conn: Any, secret: str) -> Caller | None:
    """The caller holding ``secret``, or ``None`` for an unknown or revoked key."""
    # Keys are ASCII. Header bytes that are not UTF-8 reach us as lone surrogates (aiohttp
    # decodes headers with ``surrogateescape``) and cannot even be hashed: not a key either.
    if not secret.startswith(_PREFIX) or not secret.isascii():
        return None
    row = await conn.fetchrow(
        "SELECT k.id, k.tenant_id, t.name FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
        " WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
        hash_key(secret),
    )
    if row is None:
        return None
    return Caller(tenant_id=row["tenant_id"], tenant=row["name"], key_id=row["id"])


async def key_label(conn: Any, key_id: uuid.UUID) -> str:
    """How an action records the key that did it: ``api key "<name>" <prefix>`` (the prefix is
    the part of the secret that is shown in lists, never the secret)."""
    row = await conn.fetchrow("SELECT name, prefix FROM api_keys WHERE id = $1", key_id)
    return f"api key {key_id}" if row is None else f'api key "{row["name"]}" {row["prefix"]}'


async def revoke_api_key(conn: Any, *, tenant: str, key_id: uuid.UUID) -> None:
    """Revoke a key of ``tenant`` (a key of another tenant is "not found")."""
    done = await conn.fetchval(
        "UPDATE api_keys k SET revoked_at = now() FROM tenants t"
        " WHERE k.id = $1 AND k.tenant_id = t.id AND t.name = $2 AND k.revoked_at IS NULL"
        " RETURNING k.id",
        key_id,
        tenant,
    )
    if done is None:
        raise NotFoundError(f"no active API key {key_id} for tenant {tenant}")


_LIST = """
SELECT k.id, k.name, t.name AS tenant, k.prefix, k.created_at, k.revoked_at
FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE $1::text IS NULL OR t.name = $1
ORDER BY k.created_at, k.id
"""


async def list_api_keys(conn: Any, *, tenant: str | None) -> list[KeyInfo]:
    """The keys of ``tenant`` (``None``: every tenant), revoked ones included, oldest first."""
    return [KeyInfo(**dict(r)) for r in await conn.fetch(_LIST, tenant)]
