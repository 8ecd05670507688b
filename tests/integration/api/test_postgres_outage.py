"""The HTTP API while Postgres is down (issue 27): uploads are accepted - as the CLI's and the
devices' are, docs/sessions.md - and become runs once Postgres is back; every other route
answers 503 with ``Retry-After``; nothing answers 500. The test runs its own Postgres and
stops it for real."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stages.batch import formats
from stages.batch.synth import synthesize
from streams.adapters import postgres
from streams.api.keys import create_api_key
from streams.config import Settings
from streams.sessions.intake import provision_sessions
from tests.integration.sessions.conftest import running_intake, wait_until
from tests.integration.sessions.test_api import api_client
from tests.integration.sessions.test_outage_and_dlq import _quick, _start, _stop, private_pg

__all__ = ["private_pg"]  # the fixture, used here

pytestmark = pytest.mark.slow


def _session_file(seed: int) -> bytes:
    session = synthesize(laps=1, imu_hz=10, gnss_hz=5, seed=seed)
    return formats.write("csv", {"gnss": session.gnss, "imu": session.imu})


async def test_uploads_are_accepted_and_the_rest_is_503_while_postgres_is_down(
    settings: Settings, private_pg: tuple[Any, str]
) -> None:
    server, dsn = private_pg
    s = _quick(settings, dsn)
    setup = await postgres.connect(dsn)
    try:
        key = await create_api_key(setup, tenant="acme", name="outage")
    finally:
        await setup.close()
    headers = {"Authorization": f"Bearer {key.secret}"}
    await provision_sessions(s)
    pool = await postgres.create_pool(dsn, postgres.API_POOL)
    try:
        async with api_client(s, pool) as client:
            # The key is verified once while Postgres is up.
            assert (await client.get("/v1/devices", headers=headers)).status == 200
            await asyncio.to_thread(_stop, server)
            try:
                answers = {}
                for path in ("/v1/devices", "/v1/runs", "/v1/sessions", "/v1/dead-letters",
                             "/v1/fleet"):
                    resp = await client.get(path, headers=headers)
                    answers[path] = (resp.status, resp.headers.get("Retry-After"),
                                     (await resp.json()).get("code"))
                stranger = await client.get("/v1/devices",
                                            headers={"Authorization": "Bearer tw_0000_nope"})
                uploads = []
                for i in range(3):
                    resp = await client.post(f"/v1/sessions?filename=lap{i}.csv&device=car-7",
                                             data=_session_file(i), headers=headers)
                    uploads.append((resp.status, await resp.json()))
            finally:
                await asyncio.to_thread(_start, server)
        for path, (status, retry_after, code) in answers.items():
            assert status == 503, (path, status, code)
            assert retry_after == str(s.api.retry_after_s)
            assert code == "PG_UNAVAILABLE"
        assert stranger.status == 503  # a key it cannot check: neither 401 nor 500
        assert [status for status, _ in uploads] == [202, 202, 202], uploads
        assert all(body["run_id"] is None for _, body in uploads)  # intake has not seen them
        # Postgres is back: intake makes a run of each accepted upload.
        async with running_intake(s):
            async def three_runs() -> bool:
                conn = await postgres.connect(dsn)
                try:
                    return int(await conn.fetchval("SELECT count(*) FROM processing_runs")) == 3
                finally:
                    await conn.close()

            assert await wait_until(three_runs, 60)
    finally:
        await pool.close()
