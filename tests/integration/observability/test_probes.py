"""The probes listener on a real port: /metrics, /livez with a blocked loop, /readyz on services."""

from __future__ import annotations

import asyncio
import threading
import time

import asyncpg
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from streams.observability.liveness import Heartbeat
from streams.observability.metrics import Metrics
from streams.observability.probes import ProbeServer
from streams.observability.readiness import Check, postgres_check, redis_check
from tests.integration.ingest.test_publish_failure import PrivateRedis
from tests.integration.observability.conftest import fast, get, get_json


def _metric(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} is not in the exposition")


async def test_metrics_are_served_in_the_prometheus_format() -> None:
    metrics = Metrics()
    metrics.batches.inc(3)
    metrics.envelopes.labels("completed", "").inc(8000)
    async with ProbeServer(fast(), metrics) as probes:
        assert probes.port > 0 and probes.address == f"http://127.0.0.1:{probes.port}"
        status, body = await asyncio.to_thread(get, probes.address + "/metrics")
    assert status == 200
    text = body.decode()
    assert _metric(text, "tideway_ingest_batches_total") == 3
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = [s for s in families["tideway_ingest_envelopes"].samples
                 if s.name.endswith("_total")]
    assert sample.labels == {"status": "completed", "error_code": ""} and sample.value == 8000
    assert "process_cpu_seconds" in families  # the process collector rides along


async def test_a_taken_port_is_refused_at_start() -> None:
    async with ProbeServer(fast(), Metrics()) as first:
        second = ProbeServer(fast(metrics_port=first.port), Metrics())
        with pytest.raises(OSError):
            await second.start()


async def test_livez_fails_while_the_loop_is_blocked_and_recovers() -> None:
    async with ProbeServer(fast(loop_blocked_s=0.4), Metrics()) as probes:
        await asyncio.sleep(0.3)
        seen: list[tuple[float, int, str]] = []
        during: list[tuple[int, bytes]] = []
        polling = threading.Event()
        blocked = threading.Event()

        def poll() -> None:
            # Runs in a thread of its own, so it keeps asking while the test's loop is stuck.
            polling.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (seen and seen[-1][1] == 503):
                status, body = get(probes.address + "/livez")
                seen.append((time.monotonic(), status, body.decode()))
                time.sleep(0.05)
            during.append(get(probes.address + "/metrics"))
            blocked.set()

        status, body = await asyncio.to_thread(get_json, probes.address + "/livez")
        assert (status, body["status"]) == (200, "ok"), body
        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        polling.wait(5)
        # The event loop is now deliberately blocked: nothing on it runs until this returns.
        blocked.wait(10)
        await asyncio.to_thread(thread.join, 10)

        assert seen and seen[-1][1] == 503, seen
        assert "event loop blocked for" in seen[-1][2]
        assert _metric(during[0][1].decode(), "tideway_event_loop_lag_seconds") > 0.4
        await asyncio.sleep(0.5)  # the loop runs again: the monitor stamps, /livez recovers
        status, body = await asyncio.to_thread(get_json, probes.address + "/livez")
        assert (status, body["status"], body["problems"]) == (200, "ok", []), body


async def test_livez_fails_when_a_main_loop_stops_ticking() -> None:
    beat = Heartbeat("consumer")
    settings = fast(heartbeat_stale_s=0.3)
    async with ProbeServer(settings, Metrics(), heartbeats=[beat]) as probes:
        status, _ = await asyncio.to_thread(get_json, probes.address + "/livez")
        assert status == 200
        await asyncio.sleep(0.5)  # the event loop is fine; the consumer loop is wedged
        status, body = await asyncio.to_thread(get_json, probes.address + "/livez")
        assert status == 503
        assert len(body["problems"]) == 1 and "consumer has not ticked" in body["problems"][0]
        beat.tick()
        status, body = await asyncio.to_thread(get_json, probes.address + "/livez")
        assert (status, body["problems"]) == (200, []), body


async def test_readyz_names_a_redis_that_goes_away_and_recovers(
    private_redis: PrivateRedis, pg_pool: asyncpg.Pool
) -> None:
    client = aioredis.from_url(
        private_redis.url, socket_connect_timeout=0.5, socket_timeout=0.5
    )
    metrics = Metrics()
    checks = [redis_check(client), postgres_check(pg_pool)]
    try:
        async with ProbeServer(fast(), metrics, checks=checks) as probes:
            url = probes.address + "/readyz"
            status, body = await asyncio.to_thread(get_json, url)
            assert (status, body["status"], body["failed"]) == (200, "ready", {}), body

            private_redis.stop()
            status, body = await asyncio.to_thread(get_json, url)
            assert (status, body["status"]) == (503, "not ready"), body
            assert list(body["failed"]) == ["redis"], body
            assert body["failed"]["redis"]  # says why
            assert {c["name"]: c["ok"] for c in body["checks"]} == {
                "redis": False, "postgres": True
            }
            status, livez = await asyncio.to_thread(get_json, probes.address + "/livez")
            assert status == 200, livez  # not ready is not dead
            _, text = await asyncio.to_thread(get, probes.address + "/metrics")
            assert 'tideway_readiness_check_up{check="redis"} 0.0' in text.decode()

            await private_redis.start()  # the same port again
            for _ in range(100):  # redis-py reconnects on the next command
                if (await asyncio.to_thread(get, url))[0] == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("/readyz did not turn 200 after Redis came back")
            _, text = await asyncio.to_thread(get, probes.address + "/metrics")
            assert 'tideway_readiness_check_up{check="redis"} 1.0' in text.decode()
    finally:
        await client.aclose()


async def test_a_hanging_check_fails_by_its_timeout_and_the_others_still_answer() -> None:
    async def hangs() -> None:
        await asyncio.Event().wait()

    async def fine() -> None:
        return None

    checks = [Check(name="slow", probe=hangs), Check(name="fast", probe=fine)]
    async with ProbeServer(fast(check_timeout_s=0.2), Metrics(), checks=checks) as probes:
        status, body = await asyncio.to_thread(get_json, probes.address + "/readyz")
    assert status == 503
    assert body["failed"] == {"slow": "no answer within 0.2 s"}


async def test_readyz_fails_when_the_main_loop_cannot_run_the_checks() -> None:
    async def fine() -> None:
        return None

    settings = fast(check_timeout_s=0.2)
    async with ProbeServer(settings, Metrics(), checks=[Check(name="x", probe=fine)]) as probes:
        answers: list[tuple[int, bytes]] = []
        thread = threading.Thread(
            target=lambda: answers.append(get(probes.address + "/readyz")), daemon=True
        )
        thread.start()
        time.sleep(2.0)  # noqa: ASYNC251 -- the point: block the loop past check_timeout_s + 1 s
        await asyncio.to_thread(thread.join, 10)
    ((status, body),) = answers
    assert status == 503 and b"event_loop" in body
