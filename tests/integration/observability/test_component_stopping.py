"""A component that stops withdraws its readiness checks before it closes its connections.

The probes listener outlives the components of its process. A check left registered after its
component closed its clients would keep using them: redis-py reconnects a closed client on the
next command and nothing closes that connection again (found as an unclosed socket to Redis
after an ingest consumer stopped while the readiness refresher was mid-round).
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from streams.observability.process import ProcessObservability
from streams.observability.readiness import Check, redis_check
from tests.integration.observability.conftest import fast, get_json


async def test_a_stopped_components_checks_no_longer_run_and_readyz_names_it(
    redis_url: str,
) -> None:
    client = aioredis.from_url(redis_url)
    pings = 0
    real = redis_check(client)

    async def counted() -> None:
        nonlocal pings
        pings += 1
        await real.probe()

    obs = ProcessObservability(fast(sample_interval_s=0.05), components=["ingest"])
    async with obs:
        obs.ready("ingest", Check(name="redis", probe=counted))
        url = obs.address + "/readyz"
        status, body = await asyncio.to_thread(get_json, url)
        assert status == 200 and {c["name"] for c in body["checks"]} == {"startup", "redis"}

        await obs.stopping("ingest")
        await client.aclose()
        after = pings
        for _ in range(3):  # the refresher runs a round every 50 ms, /readyz one each time
            status, body = await asyncio.to_thread(get_json, url)
            assert status == 503, body
            assert body["failed"] == {"startup": "RuntimeError: stopped: ingest"}, body
            assert [c["name"] for c in body["checks"]] == ["startup"], body
            await asyncio.sleep(0.1)
        assert pings == after  # the closed client was not used again (nor reconnected)
    assert client.connection_pool._in_use_connections == set()  # nothing was reopened
    assert all(not c.is_connected for c in client.connection_pool._available_connections)


async def test_stopping_waits_for_a_round_of_checks_already_running() -> None:
    entered, release, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def slow() -> None:
        entered.set()
        try:
            await release.wait()
        finally:
            finished.set()

    obs = ProcessObservability(fast(check_timeout_s=30.0), components=["worker"])
    async with obs:
        obs.ready("worker", Check(name="postgres", probe=slow))
        round_ = asyncio.create_task(obs.probes.check())
        await entered.wait()
        stopping = asyncio.create_task(obs.stopping("worker"))
        await asyncio.sleep(0.2)
        # The check is still using the component's connections: closing them now would race it.
        assert not stopping.done() and not finished.is_set()
        release.set()
        await stopping
        assert finished.is_set()
        assert [r.name for r in await round_] == ["startup", "postgres"]
        assert [c.name for c in obs.probes.checks] == ["startup"]
