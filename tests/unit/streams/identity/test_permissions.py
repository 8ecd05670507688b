"""What each identity may do on the broker, as data: a device only its own subjects, each
process only its role's streams; no grant reaches another account or ``$SYS``."""

from __future__ import annotations

import re

import pytest

from streams.identity.credentials import parse_username, username
from streams.identity.permissions import (
    ROLES,
    device_inbox_prefix,
    device_permissions,
    role_permissions,
)
from streams.names import Names


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def _allowed(grants: dict[str, list[str]], subject: str) -> bool:
    return any(_matches(a, subject) for a in grants.get("allow", [])) and not any(
        _matches(d, subject) for d in grants.get("deny", []))


@pytest.mark.parametrize("namespace", ["", "t1"])
def test_a_device_may_publish_only_its_own_subjects(namespace: str) -> None:
    names = Names(namespace=namespace)
    grants = device_permissions("acme", "d1", names)
    pub, sub = grants["pub"], grants["sub"]
    assert _allowed(pub, names.telemetry_subject("acme", "d1", "state"))
    assert _allowed(pub, names.sessions_subject("acme", "d1"))
    for other in (names.telemetry_subject("acme", "d2", "state"),
                  names.telemetry_subject("other", "d1", "state"),
                  names.sessions_subject("acme", "d2"),
                  names.dead_letter_subject("acme", "x"),
                  f"$JS.API.STREAM.DELETE.{names.telemetry_stream}",
                  f"$JS.API.STREAM.PURGE.OBJ_{names.session_bucket}",
                  f"$JS.API.CONSUMER.MSG.NEXT.{names.telemetry_stream}.x",
                  "$SYS.REQ.SERVER.PING", "events.acme.session.published"):
        assert not _allowed(pub, other), other
    assert _allowed(sub, f"{device_inbox_prefix('acme', 'd1')}.abc.1")
    for other in ("_INBOX.abc", f"{device_inbox_prefix('acme', 'd2')}.abc",
                  names.telemetry_subject("acme", "d1", "state"), "$SYS.ACCOUNT.x"):
        assert not _allowed(sub, other), other


def test_no_name_can_widen_a_device_grant() -> None:
    """Tenant and device names cannot hold a dot or a wildcard, so a grant built from them
    names exactly one device."""
    for name in ("a.b", "*", ">", "a b", ""):
        assert parse_username(username("acme", name)) is None
        assert parse_username(username(name, "d1")) is None
    assert parse_username("acme.d1") == ("acme", "d1")


def test_each_role_stays_within_its_streams() -> None:
    names = Names()
    grants = {role: role_permissions(role, names)["publish"] for role in ROLES}
    delete = f"$JS.API.STREAM.DELETE.{names.telemetry_stream}"
    for role, pub in grants.items():
        assert not _allowed(pub, delete), role
        assert not _allowed(pub, "$SYS.REQ.SERVER.PING"), role
    ingest_next = f"$JS.API.CONSUMER.MSG.NEXT.{names.telemetry_stream}.{names.ingest_durable}"
    assert _allowed(grants["ingest"], ingest_next)
    assert not _allowed(grants["worker"], ingest_next)
    assert not _allowed(grants["intake"], ingest_next)
    device_subject = names.telemetry_subject("acme", "d1", "state")
    assert not _allowed(grants["ingest"], device_subject)
    assert not _allowed(grants["worker"], device_subject)
    assert _allowed(grants["api"], device_subject)  # a redrive republishes an envelope
    assert _allowed(grants["intake"], f"$JS.API.STREAM.PURGE.OBJ_{names.session_bucket}")
    for role in ("ingest", "worker"):
        assert not any(re.match(r"^\$O\.", s) for s in grants[role]["allow"]), role
