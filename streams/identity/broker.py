"""The nats-server configuration that makes the broker enforce who may publish what.

Three accounts (server configuration mode, no operator):

* ``TIDEWAY`` — JetStream, the streams, every Tideway process and every device. Each process
  (:data:`~streams.identity.permissions.ROLES`) is a static nkey user with the permissions of
  :func:`~streams.identity.permissions.role_permissions`; devices are not listed: they are
  placed here by the auth service, one user JWT per connection, with their own permissions.
* ``AUTH`` — only the auth service's user; nats-server sends it every connection that is not
  one of the static users (``$SYS.REQ.USER.AUTH``) and takes its signed answer.
* ``SYS`` — the system account; its one user (``control``) may only list connections and
  disconnect one (``CONNZ``, ``KICK``): the auth service uses it to cut off a device whose
  credential was revoked.

:func:`ensure_keys` makes the nkeys (a seed file each, mode 0600, under one directory);
:func:`server_config` writes the configuration text from their public halves. ``tideway up``
uses both for its embedded server; ``tideway broker config`` prints them for a deployment
(docs/deploy.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import nkeys
import orjson

from streams.config import Settings
from streams.identity import tokens
from streams.identity.permissions import ROLES, Role, role_permissions
from streams.names import Names

__all__ = [
    "ADMIN", "AUTH_ACCOUNT", "AUTH_USER", "CONTROL_USER", "ISSUER", "SYSTEM_ACCOUNT",
    "TIDEWAY_ACCOUNT", "BrokerKeys", "as_user", "ensure_keys", "server_config",
]

TIDEWAY_ACCOUNT: Final = "TIDEWAY"
AUTH_ACCOUNT: Final = "AUTH"
SYSTEM_ACCOUNT: Final = "SYS"
AUTH_USER: Final = "auth"
CONTROL_USER: Final = "control"
ADMIN: Final = "admin"
"""The operator's role: the commands a person runs (``streams init``, replay, uploads...)."""
ISSUER: Final = "issuer"
"""The account key that signs the auth service's answers (nats-server trusts its public half)."""

CONTROL_PERMISSIONS: Final[dict[str, Any]] = {
    "publish": {"allow": ["$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.SERVER.*.KICK"]},
    "subscribe": {"allow": ["_INBOX.>"]},
}
AUTH_PERMISSIONS: Final[dict[str, Any]] = {
    "publish": {"deny": [">"]},
    "subscribe": {"allow": ["$SYS.REQ.USER.AUTH"]},
    "allow_responses": True,
}


@dataclass(frozen=True)
class BrokerKeys:
    """The seed files of one secured broker, all in ``directory``."""

    directory: Path

    def seed_file(self, name: str) -> Path:
        """``<name>.nk``: a role (``ingest``...), ``auth``, ``control`` or ``issuer``."""
        return self.directory / f"{name}.nk"

    def public(self, name: str) -> str:
        return tokens.public_key(self.seed_file(name).read_bytes())


def ensure_keys(directory: Path) -> BrokerKeys:
    """Create the seeds that do not exist yet (existing ones are kept: the broker and every
    process configured with them go on working)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    wanted: list[tuple[str, int]] = [(ISSUER, nkeys.PREFIX_BYTE_ACCOUNT)]
    wanted += [(name, nkeys.PREFIX_BYTE_USER) for name in (*ROLES, AUTH_USER, CONTROL_USER)]
    for name, prefix in wanted:
        path = directory / f"{name}.nk"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(tokens.new_seed(prefix))
    return BrokerKeys(directory)


def _user(keys: BrokerKeys, name: str, permissions: dict[str, Any]) -> dict[str, Any]:
    return {"nkey": keys.public(name), "permissions": permissions}


def server_config(keys: BrokerKeys, names: Names) -> str:
    """The ``accounts``, ``system_account`` and ``authorization`` blocks (nats-server's
    configuration format is a superset of JSON; this is the JSON part, for an ``include``)."""
    roles: list[Role] = list(ROLES)
    blocks: dict[str, Any] = {
        "accounts": {
            TIDEWAY_ACCOUNT: {
                "jetstream": "enabled",
                "users": [_user(keys, role, role_permissions(role, names)) for role in roles],
            },
            AUTH_ACCOUNT: {"users": [_user(keys, AUTH_USER, AUTH_PERMISSIONS)]},
            SYSTEM_ACCOUNT: {"users": [_user(keys, CONTROL_USER, CONTROL_PERMISSIONS)]},
        },
        "system_account": SYSTEM_ACCOUNT,
        "authorization": {
            "auth_callout": {
                "issuer": keys.public(ISSUER),
                "account": AUTH_ACCOUNT,
                "auth_users": [keys.public(n) for n in (*roles, AUTH_USER, CONTROL_USER)],
            },
        },
    }
    lines = [f"{key}: {orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()}"
             for key, value in blocks.items()]
    return "\n".join(lines) + "\n"


def as_user(settings: Settings, keys: BrokerKeys, name: str) -> Settings:
    """``settings`` connecting to NATS as the static user ``name`` (a role, or ``auth``),
    with the auth service's two other keys filled in (used by ``up``, whose one process runs
    every component, each as its own user)."""
    nats = settings.nats.model_copy(update={
        "nkey_seed_file": keys.seed_file(name), "creds_file": None, "user": None,
        "password": None,
    })
    auth = settings.auth.model_copy(update={
        "issuer_seed_file": keys.seed_file(ISSUER),
        "control_seed_file": keys.seed_file(CONTROL_USER),
    })
    return settings.model_copy(update={"nats": nats, "auth": auth})
