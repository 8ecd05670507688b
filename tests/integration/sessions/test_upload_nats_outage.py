"""An upload either becomes a run or is refused with nothing stored, whatever NATS does
(issue 27): the API answers an upload while its nats-server is killed, or frozen between the
notice and its acknowledgement, and the client's retry after the server is back ends as
exactly one run, with no session dead letter. The test runs its own nats-server."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stages.batch import formats
from stages.batch.synth import synthesize
from streams.api.keys import create_api_key
from streams.config import Settings
from tests.integration.nats_security.servers import Server, free_port, start_server
from tests.integration.sessions.conftest import running_intake, wait_until
from tests.integration.sessions.test_api import api_client

pytestmark = pytest.mark.slow


def _config(port: int, store: Path) -> str:
    return f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{store}" }}\n'


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    port = free_port()
    server = start_server(_config(port, tmp_path / "js"), tmp_path / "nats", port)
    try:
        yield server, tmp_path
    finally:
        server.stop()


def _restart(server: Server, root: Path) -> Server:
    return start_server(_config(server.port, root / "js"), root / "nats", server.port)


def _session_file() -> bytes:
    session = synthesize(laps=1, imu_hz=10, gnss_hz=5, seed=7)
    return formats.write("csv", {"gnss": session.gnss, "imu": session.imu})


async def _state(pool: Any) -> tuple[int, int, int]:
    async with pool.acquire() as conn:
        return (int(await conn.fetchval("SELECT count(*) FROM sessions")),
                int(await conn.fetchval("SELECT count(*) FROM processing_runs")),
                int(await conn.fetchval("SELECT count(*) FROM artifacts")))


def _stored_files(settings: Settings) -> list[Path]:
    root = Path(settings.objects()) / "artifacts"
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


async def _upload(client: Any, headers: dict[str, str], data: bytes) -> tuple[int, Any]:
    resp = await client.post("/v1/sessions?filename=lap.csv&device=car-7", data=data,
                             headers=headers)
    return resp.status, await resp.json()


async def _dead_letters(settings: Settings, server: Server) -> int:
    import nats

    from streams.names import Names

    nc = await nats.connect(server.url)
    try:
        info = await nc.jetstream().stream_info(
            Names(namespace=settings.namespace).sessions_dead_letter_stream)
        return int(info.state.messages)
    finally:
        await nc.close()


async def test_killed_nats_refuses_with_nothing_stored_and_the_retry_is_one_run(
    settings: Settings, pg_pool: Any, own_nats: tuple[Server, Path]
) -> None:
    server, root = own_nats
    s = settings.with_services(nats_url=server.url)
    async with pg_pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="outage")
    headers = {"Authorization": f"Bearer {key.secret}"}
    data = _session_file()
    async with running_intake(s), api_client(s, pg_pool) as client:
        server.kill()
        await asyncio.sleep(0.3)  # the API's connection notices the server is gone
        status, body = await _upload(client, headers, data)
        assert status == 503, body
        assert body["code"] == "NATS_PUBLISH"
        assert _stored_files(s) == []  # refused: nothing stored
        server = _restart(server, root)
        try:
            status, body = None, None
            for _ in range(100):  # the client retries until the API's connection is back
                status, body = await _upload(client, headers, data)
                if status == 202:
                    break
                await asyncio.sleep(0.2)
            assert status == 202, body

            async def one_run() -> bool:
                return await _state(pg_pool) == (1, 1, 1)

            assert await wait_until(one_run, 30)
            await asyncio.sleep(1.0)  # a late duplicate would be recorded by now
            assert await _state(pg_pool) == (1, 1, 1)
            assert await _dead_letters(s, server) == 0
        finally:
            server.stop()


async def test_a_notice_sent_but_not_acknowledged_keeps_its_files_and_becomes_one_run(
    settings: Settings, pg_pool: Any, own_nats: tuple[Server, Path]
) -> None:
    """The server is frozen (SIGSTOP) after the API connected: the notice is handed over and
    never acknowledged, so the API answers 503 but keeps the files; once the server runs
    again the notice is stored and becomes the run, and the client's retry finds it."""
    server, _ = own_nats
    s = settings.with_services(nats_url=server.url)
    async with pg_pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="frozen")
    headers = {"Authorization": f"Bearer {key.secret}"}
    data = _session_file()
    async with running_intake(s), api_client(s, pg_pool) as client:
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            status, body = await _upload(client, headers, data)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert status == 503, body
        assert "may still arrive" in body["detail"]
        assert len(_stored_files(s)) == 1  # in doubt: kept

        async def one_run() -> bool:
            return await _state(pg_pool) == (1, 1, 1)

        assert await wait_until(one_run, 30)  # the frozen notice arrived and was recorded
        status, body = await _upload(client, headers, data)  # the client's retry
        assert status == 202, body
        assert body["run_id"] is not None
        await asyncio.sleep(1.0)
        assert await _state(pg_pool) == (1, 1, 1)
        assert await _dead_letters(s, server) == 0


async def test_the_cli_and_device_paths_retried_after_an_outage_are_one_run_each(
    settings: Settings, pg_pool: Any, own_nats: tuple[Server, Path], tmp_path: Path
) -> None:
    from streams.errors import TransientError
    from streams.sessions.intake import provision_sessions
    from streams.sessions.upload import device_upload, upload_files

    server, root = own_nats
    s = settings.with_services(nats_url=server.url)
    await provision_sessions(s)
    path = tmp_path / "lap.csv"
    path.write_bytes(_session_file())
    device_data = synthesize(laps=1, imu_hz=10, gnss_hz=5, seed=8)
    device_bytes = formats.write("csv", {"gnss": device_data.gnss, "imu": device_data.imu})
    server.kill()
    with pytest.raises(TransientError):
        await upload_files(s, tenant="acme", device="car-7", paths=[path])
    with pytest.raises(TransientError):
        await asyncio.wait_for(device_upload(s, tenant="acme", device="buoy-1",
                                             name="buoy.csv", data=device_bytes), 30)
    assert _stored_files(s) == []
    server = _restart(server, root)
    try:
        async with running_intake(s):
            await upload_files(s, tenant="acme", device="car-7", paths=[path])
            await device_upload(s, tenant="acme", device="buoy-1", name="buoy.csv",
                                data=device_bytes)

            async def two_runs() -> bool:
                return await _state(pg_pool) == (2, 2, 2)

            assert await wait_until(two_runs, 30)
            await asyncio.sleep(1.0)
            assert await _state(pg_pool) == (2, 2, 2)
            assert await _dead_letters(s, server) == 0
    finally:
        server.stop()
