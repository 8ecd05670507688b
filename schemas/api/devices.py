"""Devices of the registry and their credentials."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from schemas.api.base import Page, Text, _Body, _Query


class DeviceQuery(_Query):
    active: bool | None = None
    schema_name: Text | None = Field(
        None, alias="schema", max_length=200, description="Only devices on this schema."
    )


class Device(_Body):
    # operator-only (the CLI's record of a device, the registry's writes' answer)
    id: uuid.UUID = Field(exclude=True)
    tenant: str = Field(exclude=True)
    external_id: str
    name: str | None
    active: bool
    schema_name: str | None = Field(alias="schema")
    schema_version: int | None
    schema_version_id: uuid.UUID | None = Field(exclude=True)  # operator-only
    created_at: datetime
    updated_at: datetime

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)


class DevicePage(Page[Device]):
    """The caller's devices by id."""


class DeviceChange(_Body):
    device: Device
    changed: bool = Field(description="False: the device already was in that state.")


class DeviceCredential(_Body):
    """One credential of a device as the registry keeps it: never its secret."""

    key_id: str = Field(description="The secret's public part (`twd_<key_id>_…`).")
    device: str
    created_at: datetime
    revoked_at: datetime | None
    state: Literal["active", "revoked", "rotated"] = Field(
        description="`rotated`: retired by a rotation; `revoked`: retired by a revoke."
    )


class DeviceCredentialPage(Page[DeviceCredential]):
    """Every credential ever issued to the device, oldest first, in one page (`next` is null)."""


class IssuedDeviceCredential(_Body):
    """A credential just issued: the only answer that ever holds its secret."""

    tenant: str
    device: str
    key_id: str
    username: str = Field(description="The NATS and MQTT user name: `<tenant>.<device>`.")
    secret: str = Field(
        description="The NATS and MQTT password. Shown once: Tideway keeps only its SHA-256."
    )
    created_at: datetime
    retired: list[str] = Field(description="Key ids the rotation retired (empty on issue).")


class RevokedDeviceCredentials(_Body):
    device: str
    revoked: list[str] = Field(description="Key ids retired (empty: none was valid).")
