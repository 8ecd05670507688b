"""The ingest consumer wired to its process's observability: metrics per batch, probes.

Real NATS, Postgres, Redis (a private redis-server the test stops and starts) and chDB; the
probes listener is the one ``tideway ingest`` starts, read over HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.config import Settings
from streams.ingest.consumer import run_consumer
from streams.observability.process import ProcessObservability
from tests.integration.ingest.conftest import Harness, good_values
from tests.integration.ingest.test_publish_failure import PrivateRedis, private_redis
from tests.integration.observability.conftest import fast, get, get_json

__all__ = ["private_redis"]  # the fixture, imported to be used here


def _samples(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = get(f"{address}/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def _until(check: Callable[[], Any], within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s (last: {value!r})")
        await asyncio.sleep(0.1)


class _Ingest:
    """``tideway ingest`` in-process: the consumer under a probes listener of its own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stop = asyncio.Event()
        self.obs = ProcessObservability(
            fast(sample_interval_s=0.2, check_timeout_s=0.5), components=("ingest",)
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Ingest:
        await self.obs.__aenter__()
        self.task = asyncio.create_task(
            run_consumer(self.settings, stop=self.stop, hooks=self.obs)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 20)
        await self.obs.__aexit__(None, None, None)


@pytest.fixture
async def ingest(fleet: Harness) -> AsyncIterator[_Ingest]:
    async with _Ingest(fleet.settings) as running:
        yield running


async def test_envelopes_counted_per_batch_match_the_recorded_rows(
    fleet: Harness, ingest: _Ingest
) -> None:
    address = ingest.obs.address
    for seq in range(1, 21):
        await fleet.publish("d1", {"ts": 1_000 + seq, "seq": seq, "values": good_values()},
                            msg_id=f"m-{seq}")
    await fleet.publish("off", {"ts": 1_000, "seq": 1, "values": good_values()})
    await fleet.publish("nobody", {"ts": 1_000, "seq": 1, "values": good_values()})

    def counted() -> float:
        samples = _samples(address)
        return sum(v for (name, _), v in samples.items()
                   if name == "tideway_ingest_envelopes_total")

    await _until(lambda: counted() >= 22, 30, "envelopes counted")
    samples = _samples(address)
    async with fleet.pool.acquire() as conn:
        rows = await conn.fetch("SELECT status, coalesce(error_code, '') AS code, count(*) AS n "
                                "FROM ingestion_messages GROUP BY 1, 2")
    recorded = {(r["status"], r["code"]): int(r["n"]) for r in rows}
    assert recorded[("completed", "")] == 20
    for (status, code), count in recorded.items():
        assert _value(samples, "tideway_ingest_envelopes_total",
                      status=status, error_code=code) == count, (status, code)
    batches = _value(samples, "tideway_ingest_batches_total")
    assert 1 <= batches <= 22  # per batch, not per envelope
    assert _value(samples, "tideway_ingest_batch_duration_seconds_count") == batches
    # Every batch prepares and records; only those with a completed envelope publish (the
    # two rejected envelopes may have come in a batch of their own).
    for phase in ("prepare", "record"):
        assert _value(samples, "tideway_ingest_batch_phase_seconds_count", phase=phase) == batches
    for sink in ("hot_state", "analytics"):
        assert 1 <= _value(samples, "tideway_ingest_batch_phase_seconds_count",
                           phase=sink) <= batches
    # The phases are parts of the batch: none took longer than the batches did altogether.
    whole = _value(samples, "tideway_ingest_batch_duration_seconds_sum")
    for phase in ("prepare", "hot_state", "analytics", "record"):
        assert 0 < _value(samples, "tideway_ingest_batch_phase_seconds_sum", phase=phase) <= whole
    assert _value(samples, "tideway_ingest_end_to_end_latency_seconds_count") == 22
    assert _value(samples, "tideway_ingest_publish_attempts_total", sink="hot_state") >= 1
    assert _value(samples, "tideway_ingest_registry_cache_misses_total") >= 1
    # The sampled consumer gauges and the readiness gauge are there too.
    names = {name for name, _ in samples}
    assert {"tideway_jetstream_consumer_pending_messages",
            "tideway_readiness_check_up"} <= names

    # Over HTTP from another thread: /readyz runs its checks on this test's event loop.
    status, ready = await asyncio.to_thread(get_json, f"{address}/readyz")
    assert status == 200, ready
    assert {c["name"] for c in ready["checks"]} == {
        "startup", "nats", "postgres", "redis", "clickhouse"}
    status, alive = await asyncio.to_thread(get_json, f"{address}/livez")
    assert status == 200 and len(alive["heartbeats"]) == fleet.settings.consumer.concurrency


async def test_readyz_follows_redis_down_and_back_while_livez_stays_up(
    fleet: Harness, private_redis: PrivateRedis
) -> None:
    settings = fleet.settings.with_services(redis_url=private_redis.url)
    async with _Ingest(settings) as ingest:
        address = ingest.obs.address
        await _until(lambda: get(f"{address}/readyz")[0] == 200, 20, "ready at start")

        private_redis.stop()
        _, body = await _until(
            lambda: (answer := get_json(f"{address}/readyz"))[0] == 503 and answer, 10,
            "/readyz 503 with Redis down",
        )
        assert set(body["failed"]) == {"redis"}, body
        assert (await asyncio.to_thread(get, f"{address}/livez"))[0] == 200

        await private_redis.start()
        await _until(lambda: get(f"{address}/readyz")[0] == 200, 10, "/readyz 200 again")
        assert (await asyncio.to_thread(get, f"{address}/livez"))[0] == 200
