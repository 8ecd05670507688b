"""The API against real services: a test client over ``build_app``, API keys, and a tenant
("acme") with one of everything the API shows - a session and its run, devices, a schema,
envelopes, dead letters and a device credential - made the way Tideway makes them (upload and
intake, the ingest consumer, the API's own routes), not inserted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from aiohttp.test_utils import TestClient

from schemas.run_config import StartFinish, TrackConfig
from streams.api.keys import create_api_key
from streams.config import Settings
from streams.ingest.fleet import SCHEMA_NAME
from streams.names import Names
from streams.sessions.saved_tracks import add_track
from streams.sessions.schedules import add_schedule
from streams.views.session_dead_letters import list_session_dead_letters
from tests.integration.ingest.conftest import Harness, fleet, good_values, harness
from tests.integration.sessions.conftest import running_intake, wait_until
from tests.integration.sessions.test_api import api_client
from tests.shared_data import data_file

__all__ = ["Seeded", "api_client", "bad_notice", "fleet", "harness", "key_headers", "seeded"]

Client = TestClient[Any, Any]


async def key_headers(pool: Any, tenant: str) -> dict[str, str]:
    async with pool.acquire() as conn:
        key = await create_api_key(conn, tenant=tenant, name="test")
    return {"Authorization": f"Bearer {key.secret}"}


@dataclass(frozen=True, kw_only=True)
class Seeded:
    """Tenant acme's things (ids as the API names them) and a client with both keys."""

    client: Client
    acme: dict[str, str]
    globex: dict[str, str]
    session_id: str
    run_id: str
    device: str
    schema: str
    message_id: int
    message_key: str
    dead_letter_id: int
    group_id: str
    credential: str
    """The key id of d1's credential (issued through the API)."""
    track: str = "Home circuit"
    """A saved track of acme's (made before the upload: the upload's run carries it)."""


async def upload(client: Client, headers: dict[str, str], device: str, path: Path) -> Any:
    form = aiohttp.FormData()
    form.add_field("device", device)
    data = await asyncio.to_thread(path.read_bytes)
    form.add_field("file", data, filename=path.name, content_type="text/plain")
    resp = await client.post("/v1/sessions", data=form, headers=headers)
    assert resp.status == 202, await resp.text()
    return await resp.json()


async def bad_notice(settings: Settings, tenant: str, device: str) -> None:
    """A notice intake can only dead-letter (not JSON), published for ``tenant``'s ``device``;
    back once the dead letter is in SESSIONS_DLQ (intake must be running)."""
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()
        await js.publish(names.sessions_subject(tenant, device), b"{not json")

        async def dead_lettered() -> bool:
            found = await list_session_dead_letters(settings, tenant=tenant, limit=1000)
            return any(d.device == device for d in found)

        await wait_until(dead_lettered)
    finally:
        await nc.close()


@pytest.fixture
async def seeded(fleet: Harness) -> AsyncIterator[Seeded]:
    """acme: the ingest fleet (schema, devices d1 d2 off bare), one good envelope and two
    malformed ones (dead letters), an uploaded session whose run intake has made (no worker
    runs, so it stays pending), a session notice intake dead-lettered (kart-2), a credential
    of d1, a scheduled backfill (nightly) and a saved track (Home circuit). globex: a key and
    nothing else."""
    good_seq = await fleet.publish("d1", {"ts": 1_000, "seq": 1, "values": good_values()})
    await fleet.publish("d1", None, raw=b"not json 1")
    await fleet.publish("d2", None, raw=b"not json 2")
    await fleet.consume(3)
    pool = fleet.pool
    async with pool.acquire() as conn:
        good = await conn.fetchrow(
            "SELECT id, source_deduplication_key FROM ingestion_messages WHERE status ="
            " 'completed' ORDER BY id LIMIT 1"
        )
        dead_letter_id = await conn.fetchval("SELECT min(id) FROM dead_letters")
        await add_schedule(conn, tenant="acme", name="nightly", cron="0 3 * * *")
        await add_track(conn, tenant="acme", track=TrackConfig(
            name="Home circuit",
            start_finish=StartFinish(lat1=52.0712, lon1=-1.0161, lat2=52.0714, lon2=-1.0161)))
    acme, globex = await key_headers(pool, "acme"), await key_headers(pool, "globex")
    nmea = data_file("nmea", "ublox-zed-f9p-nmea.log")
    async with running_intake(fleet.settings), api_client(fleet.settings, pool) as client:
        receipt = await upload(client, acme, "kart-1", nmea)
        assert receipt["run_id"], receipt
        await bad_notice(fleet.settings, "acme", "kart-2")
        groups = await (await client.get("/v1/dead-letter-groups", headers=acme)).json()
        issued = await client.post("/v1/devices/d1/credentials", headers=acme)
        assert issued.status == 201, await issued.text()
        yield Seeded(
            client=client,
            acme=acme,
            globex=globex,
            session_id=receipt["session_id"],
            run_id=receipt["run_id"],
            device="d1",
            schema=SCHEMA_NAME,
            message_id=good["id"],
            # The key's text (the row keeps its digest since migration 0020).
            message_key=await fleet.stored_key(good_seq),
            dead_letter_id=dead_letter_id,
            group_id=groups["items"][0]["id"],
            credential=(await issued.json())["key_id"],
        )


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[object]:
    from streams.adapters import postgres

    p = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=4))
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
def nmea_file() -> Path:
    return data_file("nmea", "ublox-zed-f9p-nmea.log")
