"""``tideway devices credentials`` run as a user would, against a real Postgres: the secret
printed once by issue and rotate, never by list, and only its hash stored."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import asyncpg

from tests.integration.registry.test_cli import as_json, tideway

SECRET = re.compile(r"twd_[a-z2-7]{16}_[A-Za-z0-9_-]{43}")


async def test_issue_rotate_revoke_list(pg_dsn: str, tmp_path: Path) -> None:
    async def run(*args: str) -> tuple[int, str, str]:
        return await tideway(pg_dsn, "devices", *args, cwd=tmp_path)

    assert (await run("add", "ws-001", "--tenant", "acme"))[0] == 0
    creds = ("credentials",)

    code, out, err = await run(*creds, "issue", "ws-001", "--tenant", "acme")
    assert code == 0, err
    (secret,) = SECRET.findall(out)  # printed once, and only once
    assert "username  acme.ws-001" in out
    assert "cannot be shown again" in out
    assert "NATS: user acme.ws-001" in out and "MQTT: username acme.ws-001" in out
    first = secret.split("_")[1]

    # Listing shows key ids and states, never a secret; Postgres holds only its SHA-256.
    for listing in (("list", "--tenant", "acme"), ("list", "ws-001", "--tenant", "acme")):
        code, out, err = await run(*creds, *listing)
        assert code == 0, err
        assert first in out and "active" in out and "twd_" not in out
    conn = await asyncpg.connect(pg_dsn)
    try:
        row = await conn.fetchrow("SELECT c::text AS text, secret_hash FROM device_credentials c")
    finally:
        await conn.close()
    assert bytes(row["secret_hash"]) == hashlib.sha256(secret.encode()).digest()
    assert secret not in row["text"] and secret.rsplit("_", 1)[1] not in row["text"]

    code, out, err = await run(*creds, "issue", "ws-001", "--tenant", "acme", "--json")
    assert code == 0, err
    second = as_json(out)
    assert (second["username"], second["retired"]) == ("acme.ws-001", [])
    assert SECRET.fullmatch(second["secret"]) and second["key_id"] in second["secret"]

    # Rotate: a new secret, and both others retired at once.
    code, out, err = await run(*creds, "rotate", "ws-001", "--tenant", "acme", "--json")
    assert code == 0, err
    rotated = as_json(out)
    assert sorted(rotated["retired"]) == sorted([first, second["key_id"]])
    code, out, _ = await run(*creds, "list", "ws-001", "--tenant", "acme", "--json")
    states = {c["key_id"]: c["state"] for c in as_json(out)}
    assert states == {first: "rotated", second["key_id"]: "rotated", rotated["key_id"]: "active"}
    assert all("secret" not in c for c in as_json(out))

    # Revoke one by --key; again, or an unknown key, is not found (exit 1, NOT_FOUND).
    code, out, err = await run(*creds, "revoke", "ws-001", "--key", rotated["key_id"],
                               "--tenant", "acme")  # fmt: skip
    assert code == 0, err
    assert f"revoked 1 credential(s) of device ws-001: {rotated['key_id']}" in out
    for key in (rotated["key_id"], "aaaaaaaaaaaaaaaa"):
        code, _, err = await run(*creds, "revoke", "ws-001", "--key", key, "--tenant", "acme")
        assert code == 1 and "NOT_FOUND" in err and key in err

    # Revoke without --key: every valid one; with none left, nothing (and no error).
    code, out, _ = await run(*creds, "issue", "ws-001", "--tenant", "acme", "--json")
    fresh = as_json(out)["key_id"]
    code, out, err = await run(*creds, "revoke", "ws-001", "--tenant", "acme", "--json")
    assert code == 0, err
    assert as_json(out) == {"device": "ws-001", "revoked": [fresh]}
    code, out, _ = await run(*creds, "revoke", "ws-001", "--tenant", "acme")
    assert code == 0 and "nothing revoked" in out

    # An unknown device, or another tenant's, is not found by any of the commands.
    for tenant, device in (("acme", "nope"), ("globex", "ws-001")):
        for command in ("issue", "rotate", "revoke", "list"):
            code, out, err = await run(*creds, command, device, "--tenant", tenant)
            assert code == 1, (command, out)
            assert "not found" in err and "NOT_FOUND" in err and "twd_" not in out
    code, out, _ = await run(*creds, "list", "--tenant", "globex", "--json")
    assert code == 0 and as_json(out) == []
