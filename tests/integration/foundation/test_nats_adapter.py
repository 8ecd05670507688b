"""The NATS adapter: a one-shot command gives up on a server that is not there."""

from __future__ import annotations

import socket

import pytest

from streams.adapters.nats import ONE_SHOT_ATTEMPTS, connect_nats
from streams.config import NatsSettings
from streams.errors import TransientError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


async def test_a_one_shot_connect_to_no_server_ends_in_nats_unavailable() -> None:
    url = f"nats://127.0.0.1:{_closed_port()}"
    with pytest.raises(TransientError) as raised:
        await connect_nats(NatsSettings().at(url), name="tideway-test", attempts=ONE_SHOT_ATTEMPTS)
    assert raised.value.code == "NATS_UNAVAILABLE"


async def test_a_bounded_connect_to_a_live_server_works(nats_url: str) -> None:
    nc = await connect_nats(NatsSettings().at(nats_url), name="tideway-test",
                            attempts=ONE_SHOT_ATTEMPTS)
    try:
        assert nc.is_connected
    finally:
        await nc.close()
