"""``parse_headers`` reads header blocks exactly as nats-py does (it replaces nats-py's parse
for the consumer's inbox)."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from streams.ingest.fetch import parse_headers

_NAMES = st.sampled_from(["Nats-Msg-Id", "traceparent", "X", "a b", "Émoji", "", " pad "])
_VALUES = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
                  max_size=20)  # header values travel as UTF-8: no lone surrogates


def _nats_py(raw: bytes) -> dict[str, str] | None:
    return asyncio.run(Client()._process_headers(raw))


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=5))
def test_plain_blocks_match_nats_py(pairs: list[tuple[str, str]]) -> None:
    raw = b"NATS/1.0\r\n" + b"".join(
        f"{name}: {value}\r\n".encode() for name, value in pairs) + b"\r\n"
    assert parse_headers(raw) == _nats_py(raw)


def test_status_blocks_match_nats_py() -> None:
    for raw in (b"NATS/1.0 404 No Messages\r\n\r\n", b"NATS/1.0 408 Request Timeout\r\n"
                b"Nats-Pending-Messages: 3\r\nNats-Pending-Bytes: 0\r\n\r\n",
                b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 7\r\n\r\n",
                b"NATS/1.0 503\r\n\r\n"):
        assert parse_headers(raw) == _nats_py(raw)
        assert parse_headers(raw)["Status"] == raw[9:12].decode()  # type: ignore[index]
