"""Publish failure on a real Redis that goes away: retries, dead letter, redrive, completed."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from streams.ingest import dlq
from streams.ingest.hot_state import HotState
from streams.views import dead_letters
from tests.integration.ingest.conftest import Harness, good_values


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of our own that the test can stop and start again."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.proc = self._spawn(binary)
        client = aioredis.from_url(self.url)
        try:
            for _ in range(100):
                try:
                    await client.ping()
                    return
                except Exception:
                    await asyncio.sleep(0.05)
            raise AssertionError("redis-server did not start")
        finally:
            await client.aclose()

    def _spawn(self, binary: str) -> subprocess.Popen[bytes]:
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
        ]
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    await server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_publish_failure_dead_letters_then_redrive_completes(
    fleet: Harness, private_redis: PrivateRedis
) -> None:
    settings = fleet.settings.with_services(redis_url=private_redis.url)
    ok = await fleet.publish("d1", {"ts": 1_000, "seq": 1, "values": good_values()}, msg_id="p-1")
    await fleet.consume(1, settings=settings)
    assert (await fleet.message(ok))["status"] == "completed"

    private_redis.stop()  # Redis goes away for real
    failing = await fleet.publish(
        "d1", {"ts": 2_000, "seq": 2, "values": good_values(temp=25.0)}, msg_id="p-2"
    )
    stats = await fleet.consume(2, settings=settings, within=30)
    assert sum(s.retried for s in stats) >= 1  # first delivery: nak'ed for a delayed retry
    row = await fleet.message(failing)
    assert (row["status"], row["error_code"]) == ("failed_terminal", "PUBLISH_FAILED")
    assert "hot_state" in row["error_message"]
    telemetry = await fleet.telemetry(row["id"])
    assert telemetry is not None and telemetry["processing_state"] == "publish_failed"
    assert telemetry["parameter_values"]["temp_c"] == 25.0  # telemetry kept
    assert (await fleet.stages(row["id"]))[-1] == ("publish", "failed", "PUBLISH_FAILED")
    async with fleet.pool.acquire() as conn:
        (dead,) = await dead_letters.list_dead_letters(conn)
        shown = await dead_letters.show_dead_letter(conn, dead.id)
    assert dead.reason_code == "PUBLISH_FAILED" and dead.status == "failed_terminal"
    assert shown.envelope["values"]["temp"] == 25.0  # the original envelope
    assert shown.headers == {"Nats-Msg-Id": "p-2"}
    assert {f["code"] for f in shown.failures} == {"REDIS_UNAVAILABLE"}
    # ClickHouse was up: the analytics half went through and is idempotent on redrive.
    assert await fleet.analytics_rows(row["source_deduplication_key"]) == 10

    redriven = (await dlq.redrive(settings)).results  # still down: the failure is appended
    assert [r.outcome for r in redriven] == ["failed"]
    await private_redis.start()
    redriven = (await dlq.redrive(settings)).results
    assert [(r.dead_letter_id, r.outcome) for r in redriven] == [(dead.id, "completed")]

    row = await fleet.message(failing)
    assert (row["status"], row["error_code"], row["attempts"]) == ("completed", None, 3)
    telemetry = await fleet.telemetry(row["id"])
    assert telemetry is not None and telemetry["processing_state"] == "processed"
    async with fleet.pool.acquire() as conn:
        shown = await dead_letters.show_dead_letter(conn, dead.id)
        assert await dead_letters.list_dead_letters(conn) == []
    assert shown.state == "resolved" and shown.redrive_count == 2
    # Both failed deliveries (max_deliver is 2 here) and the failed redrive.
    assert len(shown.failures) == 3
    stages = await fleet.stages(row["id"])
    assert stages[-2:] == [("publish", "failed", "PUBLISH_FAILED"), ("publish", "ok", None)]
    client = aioredis.from_url(private_redis.url)
    try:
        state = await HotState(client).read(fleet.names.hot_state_key("acme", "d1"))
    finally:
        await client.aclose()
    assert state["state"]["values"]["temp_c"] == 25.0
    assert await fleet.analytics_rows(row["source_deduplication_key"]) == 10
    assert (await dlq.redrive(settings)).results == ()  # nothing open any more
