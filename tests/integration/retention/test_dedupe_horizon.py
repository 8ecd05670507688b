"""Dedupe across partitions and dedupe generations, on real NATS and Postgres: the same key on
both sides of a boundary, or from two consumers at once, ends as one owner and one
``duplicate`` — never two owners."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import orjson

from stages.ingest.ingress import Receipt
from stages.ingest.plan import PublishOutcome, finalize
from stages.ingest.status import Status
from streams.ingest.pipeline import Pipeline
from streams.ingest.provision import provision
from streams.ingest.resources import Resources
from streams.retention import maintain
from tests.integration.ingest.conftest import TENANT, Harness, good_values

_OK = PublishOutcome(duration_us=1, hot_state_written=True, analytics_published=True)


def _receipt(h: Harness, seq: int, at: datetime, msg_id: str) -> Receipt:
    body = orjson.dumps({"ts": 1000, "seq": seq, "values": good_values()})
    return Receipt.of(
        subject=h.names.telemetry_subject(TENANT, "d1", "state"),
        data=body,
        headers={"Nats-Msg-Id": msg_id},
        stream_seq=seq,
        received_at_ns=int(at.timestamp()) * 10**9 + at.microsecond * 1000,
    )


async def test_a_key_on_both_sides_of_a_partition_and_generation_boundary_has_one_owner(
    fleet: Harness,
) -> None:
    """B's dedupe read runs before A records the key; then a new generation starts (and a new
    day's partition takes the rows); B must still find A and record a duplicate. Recording B
    into the new generation without looking back would make a second owner."""
    midnight = datetime(2031, 1, 2, tzinfo=UTC)
    before, after = midnight - timedelta(microseconds=1), midnight + timedelta(microseconds=1)
    resources = await Resources.open(fleet.settings)
    try:
        async with resources.pool.acquire() as conn:
            await maintain.ensure_ahead(conn, fleet.settings, before)
        pipeline = Pipeline(resources)
        b = _receipt(fleet, 2, after, "both-sides")
        evaluations, fates, seen_gen = await pipeline.prepare([b])  # nothing holds it yet
        assert fates[0].fate.value == "new"
        first = await pipeline.process([_receipt(fleet, 1, before, "both-sides")])
        assert first.stats.statuses == {Status.COMPLETED: 1}
        async with resources.pool.acquire() as conn:
            await maintain.ensure_generations(conn)
            assert await maintain.start_generation(conn, datetime.now(UTC)) == seen_gen + 1
        recorded = await pipeline.recorder.record_safely(
            evaluations, fates, {0: finalize(evaluations[0], _OK)}, gen=seen_gen
        )
        assert recorded.statuses == {0: Status.DUPLICATE}
    finally:
        await resources.close()
    async with fleet.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, status, duplicate_of, tableoid::regclass::text AS part"
            " FROM ingestion_messages ORDER BY stream_seq"
        )
        keys = await conn.fetch("SELECT gen, message_id FROM ingest_dedupe_keys")
    owner, dup = rows
    assert (owner["status"], dup["status"], dup["duplicate_of"]) == (
        "completed",
        "duplicate",
        owner["id"],
    )
    assert (owner["part"], dup["part"]) == (
        "ingestion_messages_p20310101",
        "ingestion_messages_p20310102",
    )
    assert [(k["gen"], k["message_id"]) for k in keys] == [(seen_gen, owner["id"])]


async def test_two_consumers_racing_across_generation_changes_leave_one_owner_per_key(
    fleet: Harness,
) -> None:
    """Every key arrives twice (past JetStream's duplicate window); two consumer tasks share
    the durable while dedupe generations keep changing under them."""
    stream = fleet.settings.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(fleet.settings.model_copy(update={"stream": stream}))
    n = 150
    for round_ in range(2):
        for i in range(n):
            await fleet.publish(
                "d1" if i % 2 else "d2",
                {"ts": i + round_, "seq": i, "values": good_values()},
                msg_id=f"race-{i}",
            )
        await asyncio.sleep(0.3)
    started: list[int] = []

    async def rotate() -> None:
        # As the maintenance leader would: holding its lock (the consumers' first rounds
        # run concurrently with this).
        key = maintain.sql.MAINTENANCE_LOCK_KEY
        while True:
            async with fleet.pool.acquire() as conn:
                await conn.execute("SELECT pg_advisory_lock($1)", key)
                try:
                    await maintain.ensure_generations(conn)
                    started.append(await maintain.start_generation(conn, datetime.now(UTC)))
                finally:
                    await conn.execute("SELECT pg_advisory_unlock($1)", key)
            await asyncio.sleep(0.02)

    settings = fleet.settings.model_copy(
        update={"consumer": fleet.settings.consumer.model_copy(update={"batch_size": 10})}
    )
    rotator = asyncio.create_task(rotate())
    try:
        await asyncio.gather(
            fleet.consume(2 * n, settings=settings, within=60),
            fleet.consume(2 * n, settings=settings, within=60),
        )
    finally:
        rotator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rotator
    assert len(started) >= 5  # the generations did change while they raced
    async with fleet.pool.acquire() as conn:
        owners = await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE status <> 'duplicate'"
        )
        duplicates = await conn.fetchval(
            "SELECT count(*) FROM ingestion_messages WHERE status = 'duplicate'"
        )
        keys = await conn.fetchval("SELECT count(DISTINCT key_hash) FROM ingest_dedupe_keys")
        all_keys = await conn.fetchval("SELECT count(*) FROM ingest_dedupe_keys")
    assert (owners, duplicates, keys, all_keys) == (n, n, n, n)
    assert await fleet.count("SELECT count(*) FROM device_telemetry_logs") == n
