"""What a tenant name and a device id may be: the names a device uses on its subjects
(``telemetry.<tenant>.<device>.<topic>``) and, joined by a dot, as its NATS user name."""

from __future__ import annotations

import re

from streams.errors import UsageError

__all__ = ["DEVICE_RE", "TENANT_RE", "check_device", "check_tenant"]

TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEVICE_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
# Checked with fullmatch: ``$`` would also match before a final newline ("d1\n").


def check_tenant(name: str) -> str:
    """``name`` if it is a valid tenant name, else :class:`UsageError`."""
    if not TENANT_RE.fullmatch(name):
        raise UsageError(f"invalid tenant name {name!r} (lower case letters, digits, - and _)")
    return name


def check_device(name: str) -> str:
    """``name`` if it is a valid device id, else :class:`UsageError`."""
    if not DEVICE_RE.fullmatch(name):
        raise UsageError(f"invalid device id {name!r} (letters, digits, - and _)")
    return name
