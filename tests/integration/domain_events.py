"""Test helpers for domain events: a relay of the test's own, and a tenant's events heard live.

In a deployment every worker runs the relay (streams.domain_events.relay); tests that change
runs without a worker (the CLI's and the API's run actions) run one here, as a worker would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import nats
import orjson
from nats.aio.msg import Msg

from streams.adapters import postgres
from streams.config import Settings
from streams.domain_events import EventRelay
from streams.names import Names


@contextlib.asynccontextmanager
async def relaying(settings: Settings, *, drain: bool = False) -> AsyncIterator[EventRelay]:
    """An event relay running over ``settings``' database and NATS, as a worker runs it.

    ``drain``: relay what the outbox already holds before returning (so that a listener
    subscribed afterwards hears only what happens from then on)."""
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=2))
    relay = EventRelay(settings, pool)
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    try:
        if drain:
            while (await relay.relay_round()).relayed:
                pass
        task = asyncio.create_task(relay.run(stop))
        yield relay
    finally:
        stop.set()
        if task is not None:
            await asyncio.wait_for(task, 15)
        await relay.aclose()
        await pool.close()


@contextlib.asynccontextmanager
async def hearing(settings: Settings, tenant: str) -> AsyncIterator[list[dict[str, Any]]]:
    """The tenant's domain events, on real NATS, as they arrive from now on (a relay runs
    meanwhile; what the outbox held before is relayed before listening starts)."""
    heard: list[dict[str, Any]] = []

    async def on_event(msg: Msg) -> None:
        heard.append(orjson.loads(msg.data))

    async with relaying(settings, drain=True):
        nc = await nats.connect(settings.nats())
        try:
            names = Names(namespace=settings.namespace)
            await nc.subscribe(names.tenant_events_subjects(tenant), cb=on_event)
            await nc.flush()
            yield heard
        finally:
            await nc.close()


async def heard_event(heard: list[dict[str, Any]], kind: str, run_id: Any,
                      within_s: float = 10.0) -> dict[str, Any]:
    """The first event of ``kind`` about ``run_id`` heard (waits up to ``within_s``)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < deadline:
        for event in heard:
            if event["type"] == kind and event["run_id"] == str(run_id):
                return event
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} for run {run_id}; heard {heard}")
