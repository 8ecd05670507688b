"""Run config validation (issue 15 item 6): a misspelt key is refused where a run is asked
for - the CLI upload, the API upload and intake - with the key named, and nothing is stored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import nats
import orjson
from typer.testing import CliRunner

from streams.cli.main import app
from streams.config import Settings
from streams.errors import UsageError
from streams.names import Names
from streams.objects import ObjectStore
from streams.sessions.upload import device_upload
from tests.integration.sessions.conftest import running_intake
from tests.integration.sessions.test_api import _key, api_client

MISSPELT = '{"laps": {"min_lap_sx": 5}}'
NAMED = "config.laps.min_lap_sx: unknown key"


def _stored(settings: Settings) -> list[str]:
    return ObjectStore(settings.objects()).list("artifacts")


async def test_cli_upload_refuses_a_misspelt_key(cli_env: Settings, nmea_file: Path) -> None:
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["sessions", "upload", str(nmea_file), "--device", "kart-9", "--config", MISSPELT],
    )
    assert isinstance(result.exception, UsageError), result.output
    assert result.exception.code == "INVALID_CONFIG"
    assert NAMED in str(result.exception)
    assert _stored(cli_env) == []


async def test_api_upload_refuses_a_misspelt_key(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    headers = await _key(pool, "acme")
    data = await asyncio.to_thread(nmea_file.read_bytes)
    async with api_client(settings, pool) as client:
        form = aiohttp.FormData()
        form.add_field("device", "kart-9")
        form.add_field("config", MISSPELT)
        form.add_field("file", data, filename="lap.nmea", content_type="text/plain")
        resp = await client.post("/v1/sessions", data=form, headers=headers)
        body = await resp.json()
    assert resp.status == 400, body
    assert body["code"] == "INVALID_CONFIG"
    assert NAMED in body["detail"]
    assert _stored(settings) == []


async def test_intake_dead_letters_a_device_notice_with_a_misspelt_key(
    settings: Settings, pool: Any
) -> None:
    """A device's notice reaches only intake: refused there (never retried), not a run."""
    names = Names(namespace=settings.namespace)
    async with running_intake(settings):
        await device_upload(
            settings,
            tenant="acme",
            device="buoy-1",
            name="a.nmea",
            data=b"$GPGGA\n",
            config=orjson.loads(MISSPELT),
        )
        nc = await nats.connect(settings.nats())
        try:
            sub = await nc.jetstream().pull_subscribe(
                names.sessions_dead_letter_subjects, stream=names.sessions_dead_letter_stream
            )
            dead = orjson.loads((await sub.fetch(1, timeout=10))[0].data)
        finally:
            await nc.close()
    assert dead["code"] == "INVALID_CONFIG"
    assert NAMED in dead["message"]
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM processing_runs") == 0
