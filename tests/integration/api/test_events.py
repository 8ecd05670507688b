"""Domain events from the Postgres outbox through the EVENTS stream to browsers over server-sent
events: a tenant's stream carries its own events - of runs made by intake, changed by the API's
run actions and by workers, of sessions published - and never another tenant's; a client that
reconnects with ``Last-Event-ID`` gets what it missed."""

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
from streams.sessions.progress import wait_for_run
from tests.integration.api.conftest import Client, Seeded, api_client, key_headers, upload
from tests.integration.domain_events import relaying
from tests.integration.sessions.conftest import running_system
from tests.shared_data import data_file


class Listener:
    """An SSE client: collects ``(event, data)`` pairs from an open ``/v1/events`` answer."""

    def __init__(self, resp: ClientResponse) -> None:
        self.resp = resp
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.ids: list[int] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        event, data, id_ = "message", "", ""
        async for raw in self.resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                id_ = line[3:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line and data:
                self.events.append((event, orjson.loads(data)))
                self.ids.append(int(id_))
                event, data, id_ = "message", "", ""

    async def wait_for(self, kind: str, within: float = 60.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + within
        while asyncio.get_running_loop().time() < deadline:
            for event, data in self.events:
                if event == kind:
                    return data
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {kind} event; saw {[e for e, _ in self.events]}")


@contextlib.asynccontextmanager
async def listening(client: Client, headers: dict[str, str], *, last_event_id: int | None = None
                    ) -> AsyncIterator[Listener]:
    if last_event_id is not None:
        headers = {**headers, "Last-Event-ID": str(last_event_id)}
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
    settings = _settings_of(client)
    async with relaying(settings, drain=True), listening(client, seeded.acme) as acme, \
            listening(client, seeded.globex) as gx:
        resp = await client.post(f"/v1/runs/{seeded.run_id}/cancel", headers=seeded.acme)
        assert resp.status == 200
        cancelled = await acme.wait_for("run.cancelled")
        assert cancelled["run_id"] == seeded.run_id
        assert cancelled["session_id"] == seeded.session_id and cancelled["tenant"] == "acme"
        retried = await (await client.post(f"/v1/runs/{seeded.run_id}/retry",
                                           headers=seeded.acme)).json()  # fmt: skip
        assert (await acme.wait_for("run.pending"))["run_id"] == retried["run_id"]
        # A run of globex's (its upload, made by intake) reaches globex's stream, not acme's.
        receipt = await upload(client, seeded.globex, "gx-1",
                               data_file("nmea", "ublox-zed-f9p-nmea.log"))
        made = await gx.wait_for("run.pending")
        assert made["run_id"] == receipt["run_id"] and made["tenant"] == "globex"
        await asyncio.sleep(0.3)  # give a leaked event the time to arrive
    assert all(data["tenant"] == "acme" for _, data in acme.events)
    assert [e for e, _ in gx.events] == ["run.pending"]


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
            # Each change announced once, in the order it committed (one run's changes lock
            # its row, so their outbox ids - and stream sequences - follow commit order).
            of_run = [e for e, d in heard.events
                      if d["run_id"] == receipt["run_id"] and e.startswith("run.")]
            assert of_run == ["run.pending", "run.running", f"run.{final.status}"]
            assert [e for e, _ in heard.events].count("session.published") == 1
            assert heard.ids == sorted(heard.ids) and len(set(heard.ids)) == len(heard.ids)
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
    async with relaying(_settings_of(client), drain=True), listening(client, headers) as doomed, \
            listening(client, seeded.acme) as kept:
        resp = await client.post(f"/v1/runs/{seeded.run_id}/cancel", headers=seeded.acme)
        assert resp.status == 200
        assert (await doomed.wait_for("run.cancelled"))["run_id"] == seeded.run_id
        async with pool.acquire() as conn:
            await revoke_api_key(conn, tenant="acme", key_id=key.id)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(doomed.task, KEY_CHECK_S + 3)  # the server ended it
        ended = asyncio.get_running_loop().time() - started
        resp = await client.post(f"/v1/runs/{seeded.run_id}/retry", headers=seeded.acme)
        retried = (await resp.json())["run_id"]
        assert (await kept.wait_for("run.pending"))["run_id"] == retried
        await asyncio.sleep(0.3)
        assert [e for e, _ in kept.events] == ["run.cancelled", "run.pending"]
    assert [e for e, _ in doomed.events] == ["run.cancelled"]
    assert ended <= KEY_CHECK_S + 3


async def test_a_client_that_reconnects_with_last_event_id_gets_what_it_missed(
    seeded: Seeded,
) -> None:
    """Issue 27: events were hints on core NATS, lost for a client that was away. Now a
    client reconnecting with the id of the last event it saw gets every later one, in order,
    and none twice."""
    client = seeded.client
    async with relaying(_settings_of(client), drain=True):
        async with listening(client, seeded.acme) as first:
            await client.post(f"/v1/runs/{seeded.run_id}/cancel", headers=seeded.acme)
            await first.wait_for("run.cancelled")
        [seen] = first.ids
        # Away: a retry is made and cancelled (two events the client did not hear).
        retried = (await (await client.post(f"/v1/runs/{seeded.run_id}/retry",
                                            headers=seeded.acme)).json())["run_id"]
        await client.post(f"/v1/runs/{retried}/cancel", headers=seeded.acme)
        async with listening(client, seeded.acme, last_event_id=seen) as back:
            await back.wait_for("run.cancelled")
            await asyncio.sleep(0.3)
        assert [(e, d["run_id"]) for e, d in back.events] == [
            ("run.pending", retried), ("run.cancelled", retried)]
        assert back.ids[0] > seen and back.ids == sorted(back.ids)
        # Without the header: only what happens from now on (nothing here).
        async with listening(client, seeded.acme) as fresh:
            await asyncio.sleep(0.5)
        assert fresh.events == []
        resp = await client.get("/v1/events", headers={**seeded.acme, "Last-Event-ID": "x1"})
        problem = await resp.json()
        assert resp.status == 400 and "Last-Event-ID" in problem["detail"], problem
