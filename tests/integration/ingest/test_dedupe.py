"""Dedupe on real services: with and without Nats-Msg-Id, in a batch and across batches,
and JetStream redeliveries of the same message."""

from __future__ import annotations

import asyncio

from stages.ingest.ingress import key_hash
from streams.config import Settings
from streams.ingest.fetch import Fetcher, receipt_of
from streams.ingest.pipeline import Pipeline
from streams.ingest.provision import provision
from streams.ingest.resources import Resources
from tests.integration.ingest.conftest import Harness, good_values


async def _short_window(h: Harness) -> None:
    """JetStream absorbs repeats inside its duplicate window; shrink it so repeats reach us."""
    stream = h.settings.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(h.settings.model_copy(update={"stream": stream}))


async def test_repeat_of_a_message_id_is_recorded_as_duplicate_across_batches(
    fleet: Harness,
) -> None:
    await _short_window(fleet)
    first = await fleet.publish("d1", {"ts": 1000, "seq": 1, "values": good_values()}, msg_id="m-1")
    await fleet.consume(1)
    await asyncio.sleep(0.3)
    repeat = await fleet.publish(
        "d1", {"ts": 1000, "seq": 1, "values": good_values(temp=30.0)}, msg_id="m-1"
    )
    assert repeat != first  # JetStream stored it: Tideway's dedupe must catch it
    await fleet.consume(2)
    owner, dup = await fleet.message(first), await fleet.message(repeat)
    assert owner["status"] == "completed"
    assert (dup["status"], dup["duplicate_of"], dup["source_deduplication_key"]) == (
        "duplicate",
        owner["id"],
        None,
    )
    assert await fleet.stages(dup["id"]) == []
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 1
    assert await fleet.analytics_rows() == 10
    hot = await fleet.hot_state("d1")
    assert hot["state"]["values"]["temp_c"] == 21.5  # the duplicate's values never published


async def test_repeat_inside_one_batch_is_a_duplicate_of_the_first(fleet: Harness) -> None:
    await _short_window(fleet)
    first = await fleet.publish("d1", {"ts": 1000, "values": good_values()}, msg_id="m-2")
    await asyncio.sleep(0.3)
    repeat = await fleet.publish("d1", {"ts": 1000, "values": good_values()}, msg_id="m-2")
    # One batch in flight, so both envelopes arrive in the same batch (the case under test);
    # with two in flight the repeat may win the race and own the key, which is also correct.
    one_batch = fleet.settings.consumer.model_copy(update={"concurrency": 1})
    await fleet.consume(2, settings=fleet.settings.model_copy(update={"consumer": one_batch}))
    owner, dup = await fleet.message(first), await fleet.message(repeat)
    assert owner["status"] == "completed" and dup["status"] == "duplicate"
    assert dup["duplicate_of"] == owner["id"]
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 1


async def test_without_message_id_repeated_payloads_are_distinct_events(fleet: Harness) -> None:
    payload = {"ts": 1000, "values": good_values()}
    seqs = [await fleet.publish("d1", payload) for _ in range(3)]
    await fleet.consume(3)
    rows = [await fleet.message(s) for s in seqs]
    assert [r["status"] for r in rows] == ["completed"] * 3
    assert len({r["source_deduplication_key"] for r in rows}) == 3
    # The row keeps the key's digest (migration 0020): the digest of the receipt's key.
    assert [r["source_deduplication_key"].hex for r in rows] == [
        key_hash(await fleet.stored_key(s)) for s in seqs]
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 3


async def _process_twice(settings: Settings, n: int) -> tuple[list[int], list[int]]:
    """Process a batch, "crash" before acking (nak now), then process its redelivery."""
    resources = await Resources.open(settings)
    fetcher = await Fetcher(
        resources.nc,
        stream=resources.names.telemetry_stream,
        durable=resources.names.ingest_durable,
    ).start()
    try:
        pipeline = Pipeline(resources)
        first = await fetcher.fetch(n, 1.0)
        r1 = await pipeline.process([receipt_of(m) for m in first])
        for msg in first:
            await resources.nc.publish(msg.reply, b"-NAK")
        again: list = []
        while len(again) < n:
            again += await fetcher.fetch(n - len(again), 1.0)
        receipts = [receipt_of(m) for m in again]
        assert all(r.delivered == 2 for r in receipts)
        r2 = await pipeline.process(receipts)
        for msg in again:
            await resources.nc.publish(msg.reply, b"+ACK")
        return (
            [r1.stats.size, sum(r1.stats.statuses.values()), r1.stats.already_recorded],
            [r2.stats.size, sum(r2.stats.statuses.values()), r2.stats.already_recorded],
        )
    finally:
        await fetcher.stop()
        await resources.close()


async def test_redelivery_of_the_same_message_is_not_processed_twice(fleet: Harness) -> None:
    await _short_window(fleet)
    await fleet.publish("d1", {"ts": 1, "values": good_values()})  # no message id
    await fleet.publish("d1", {"ts": 2, "values": good_values()}, msg_id="k-1")
    await asyncio.sleep(0.3)
    await fleet.publish("d1", {"ts": 2, "values": good_values()}, msg_id="k-1")  # a duplicate
    first, second = await _process_twice(fleet.settings, 3)
    assert first == [3, 3, 0]  # completed, completed, duplicate
    assert second == [3, 0, 3]  # all three recognised as already recorded
    assert await fleet.count() == 3
    assert (
        await fleet.count("SELECT count(*) FROM ingestion_messages WHERE status = 'duplicate'") == 1
    )
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == 2
    assert await fleet.count("SELECT count(*) FROM ingestion_stage_logs") == 12
    assert await fleet.analytics_rows() == 20


async def test_two_consumers_sharing_the_durable_record_each_envelope_once(
    fleet: Harness,
) -> None:
    n = 300
    for i in range(n):
        await fleet.publish(
            "d1" if i % 2 else "d2",
            {"ts": i, "seq": i, "values": good_values()},
            msg_id=f"c-{i}" if i % 3 else None,
        )
    settings = fleet.settings.model_copy(
        update={"consumer": fleet.settings.consumer.model_copy(update={"batch_size": 20})}
    )
    both = asyncio.gather(fleet.consume(n, settings=settings), fleet.consume(n, settings=settings))
    stats_a, stats_b = await both
    assert sum(s.size for s in stats_a) > 0 and sum(s.size for s in stats_b) > 0
    assert await fleet.count() == n
    assert (
        await fleet.count("SELECT count(*) FROM ingestion_messages WHERE status = 'completed'") == n
    )
    assert (
        await fleet.count("SELECT count(DISTINCT ingestion_message_id) FROM device_telemetry_logs")
        == n
    )
    assert await fleet.analytics_rows() == 10 * n
