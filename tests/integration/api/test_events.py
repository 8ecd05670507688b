"""Domain events over real NATS, to browsers over server-sent events: a tenant's stream carries
its own events - from the API's run actions, from ``publish_session`` and from the worker as a
run ends - and never another tenant's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from aiohttp import ClientResponse

from streams.api.context import CONTEXT
from streams.config import Settings
from streams.domain_events import DomainEvents
from streams.sessions.progress import wait_for_run
from tests.integration.api.conftest import Client, Seeded, api_client, key_headers, upload
from tests.integration.sessions.conftest import running_system


class Listener:
    """An SSE client: collects ``(event, data)`` pairs from an open ``/v1/events`` answer."""

    def __init__(self, resp: ClientResponse) -> None:
        self.resp = resp
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        event, data = "message", ""
        async for raw in self.resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line and data:
                self.events.append((event, orjson.loads(data)))
                event, data = "message", ""

    async def wait_for(self, kind: str, within: float = 60.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + within
        while asyncio.get_running_loop().time() < deadline:
            for event, data in self.events:
                if event == kind:
                    return data
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {kind} event; saw {[e for e, _ in self.events]}")


@contextlib.asynccontextmanager
async def listening(client: Client, headers: dict[str, str]) -> AsyncIterator[Listener]:
    resp = await client.get("/v1/events", headers=headers)
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    assert resp.headers["X-Request-Id"]
    listener = Listener(resp)
    try:
        yield listener
    finally:
        listener.task.cancel()
        await asyncio.gather(listener.task, return_exceptions=True)
        resp.close()


async def test_each_tenant_hears_only_its_own_events(seeded: Seeded) -> None:
    client = seeded.client
    async with listening(client, seeded.acme) as acme, listening(client, seeded.globex) as gx:
        resp = await client.post(f"/v1/runs/{seeded.run_id}/cancel", headers=seeded.acme)
        assert resp.status == 200
        cancelled = await acme.wait_for("run.cancelled")
        assert cancelled["run_id"] == seeded.run_id
        assert cancelled["session_id"] == seeded.session_id and cancelled["tenant"] == "acme"
        retried = await (await client.post(f"/v1/runs/{seeded.run_id}/retry",
                                           headers=seeded.acme)).json()  # fmt: skip
        assert (await acme.wait_for("run.pending"))["run_id"] == retried["run_id"]
        # An event of globex's reaches globex's stream and not acme's.
        events = DomainEvents(_settings_of(client))
        await events.publish("globex", "run.failed", run_id="r-of-globex")
        await events.aclose()
        assert (await gx.wait_for("run.failed"))["run_id"] == "r-of-globex"
        await asyncio.sleep(0.3)  # give a leaked event the time to arrive
    assert all(data["tenant"] == "acme" for _, data in acme.events)
    assert [e for e, _ in gx.events] == ["run.failed"]


def _settings_of(client: Client) -> Settings:
    app = client.server.app
    assert app is not None
    return app[CONTEXT].settings


async def test_a_published_session_and_its_finished_run_are_announced(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    acme, globex = await key_headers(pool, "acme"), await key_headers(pool, "globex")
    async with running_system(settings), api_client(settings, pool) as client:
        async with listening(client, acme) as heard, listening(client, globex) as other:
            receipt = await upload(client, acme, "kart-9", nmea_file)
            final = await wait_for_run(settings, run_id=receipt["run_id"], timeout_s=90)
            assert final.status in {"succeeded", "partial"}
            # The run's whole life: made by intake, started by a worker, finished.
            pending = await heard.wait_for("run.pending")
            assert pending["run_id"] == receipt["run_id"]
            assert pending["session_id"] == receipt["session_id"]
            assert (await heard.wait_for("run.running"))["run_id"] == receipt["run_id"]
            published = await heard.wait_for("session.published")
            assert published["session_id"] == receipt["session_id"]
            assert published["run_id"] == receipt["run_id"]
            finished = await heard.wait_for(f"run.{final.status}")
            assert finished["run_id"] == receipt["run_id"]
            await asyncio.sleep(0.3)
            # Announced once (events from two processes keep no order between them).
            assert [e for e, _ in heard.events].count("run.running") == 1
        assert other.events == []


async def test_revoking_a_key_ends_the_streams_it_opened(seeded: Seeded, pool: Any) -> None:
    """A stream opened before ``api-keys revoke`` stops within seconds: it hears no event of
    the tenant after the revocation, and its connection ends."""
    from streams.api.event_stream import KEY_CHECK_S
    from streams.api.keys import create_api_key, revoke_api_key

    async with pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="to-revoke")
    headers = {"Authorization": f"Bearer {key.secret}"}
    client = seeded.client
    events = DomainEvents(_settings_of(client))
    try:
        async with listening(client, headers) as doomed, listening(client, seeded.acme) as kept:
            await events.publish("acme", "run.failed", run_id="before")
            assert (await doomed.wait_for("run.failed"))["run_id"] == "before"
            async with pool.acquire() as conn:
                await revoke_api_key(conn, tenant="acme", key_id=key.id)
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(doomed.task, KEY_CHECK_S + 3)  # the server ended it
            ended = asyncio.get_running_loop().time() - started
            await events.publish("acme", "run.failed", run_id="after")
            assert (await kept.wait_for("run.failed"))["run_id"] == "before"
            await asyncio.sleep(0.3)
            assert [d["run_id"] for _, d in kept.events] == ["before", "after"]
        assert [d["run_id"] for _, d in doomed.events] == ["before"]
        assert ended <= KEY_CHECK_S + 3
    finally:
        await events.aclose()
