"""Connecting as a device: what ``simulate`` and the device upload path do, and what a
device's own firmware does (docs/security.md shows the same in a few lines of nats-py)."""

from __future__ import annotations

from pydantic import SecretStr

from streams.adapters.nats import Nats, connect_nats
from streams.config import NatsSettings
from streams.identity.credentials import username
from streams.identity.permissions import device_inbox_prefix

__all__ = ["connect_device", "device_login"]


def device_login(nats: NatsSettings, *, tenant: str, device: str, secret: str) -> NatsSettings:
    """``nats`` (servers, TLS) with the device's user name and secret as its login."""
    return nats.model_copy(update={
        "user": username(tenant, device), "password": SecretStr(secret),
        "nkey_seed_file": None, "creds_file": None,
    })


async def connect_device(nats: NatsSettings, *, tenant: str, device: str, secret: str,
                         name: str, attempts: int = -1) -> Nats:
    """A NATS connection authenticated as the device, reading replies on its own inbox."""
    return await connect_nats(device_login(nats, tenant=tenant, device=device, secret=secret),
                              name=name, attempts=attempts,
                              inbox_prefix=device_inbox_prefix(tenant, device))
