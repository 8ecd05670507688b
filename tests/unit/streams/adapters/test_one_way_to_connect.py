"""Each external system is connected to in one module (``streams.adapters``, ``streams.clickhouse``,
``streams.objects``), and only ``streams.ingest.fetch`` reaches into nats-py's internals."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.client import JetStreamContext

STREAMS = Path(__file__).resolve().parents[4] / "streams"

# What opens a connection (or a client that does), and the one module allowed to.
CONNECTS = {
    r"\basyncpg\.(connect|create_pool)\(": "adapters/postgres.py",
    r"\bnats\.connect\(|\b(Nats|NatsClient|Client)\(\)": "adapters/nats.py",
    r"\bfrom_url\(|\bRedis\(": "adapters/redis.py",
    r"\bclickhouse_connect\.get_client\(": "clickhouse.py",
    r"\bFileSystem\.from_uri\(|\bLocalFileSystem\(": "objects.py",
}


def _sources() -> list[Path]:
    return sorted(STREAMS.rglob("*.py"))


@pytest.mark.parametrize("pattern", sorted(CONNECTS))
def test_each_system_is_connected_to_in_its_adapter_only(pattern: str) -> None:
    home = STREAMS / CONNECTS[pattern]
    found = [
        f"{path.relative_to(STREAMS)}:{n}"
        for path in _sources() if path != home
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(pattern, line)
    ]
    assert found == [], f"connects outside {CONNECTS[pattern]}"
    assert re.search(pattern, home.read_text()), f"{CONNECTS[pattern]} no longer connects"


def _nats_private_names() -> set[str]:
    names: set[str] = set()
    for cls in (Client, Msg, Subscription, JetStreamContext):
        names |= {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    names |= {n for n in vars(Client()) if n.startswith("_") and not n.startswith("__")}
    return names


def test_only_fetch_touches_nats_py_internals() -> None:
    private = _nats_private_names()
    fetch = STREAMS / "ingest" / "fetch.py"
    found = []
    for path in _sources():
        if path == fetch:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                node.value.id in {"self", "cls"})
            if isinstance(node, ast.Attribute) and node.attr in private and not own:
                found.append(f"{path.relative_to(STREAMS)}:{node.lineno} .{node.attr}")
    assert found == []
    assert "only module that touches nats-py's" in (fetch.read_text().split('"""')[1])
