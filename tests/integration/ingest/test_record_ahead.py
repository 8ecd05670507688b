"""The recording transaction that runs while a batch is published (``Recorder.record_ahead``),
on a real Postgres: nothing of it is visible before the sinks have answered, it commits the
real publish outcome, and it leaves nothing behind when a publish failed."""

from __future__ import annotations

import time

import orjson

from stages.ingest.ingress import Receipt
from stages.ingest.plan import Final, PublishOutcome, finalize
from stages.ingest.status import Status
from streams.ingest.pipeline import Pipeline
from streams.ingest.resources import Resources
from tests.integration.ingest.conftest import TENANT, Harness, good_values

_HOPED = PublishOutcome(duration_us=0, hot_state_written=True, analytics_published=True)
_DONE = PublishOutcome(duration_us=4321, hot_state_written=True, analytics_published=True)
_COUNTS = """
SELECT (SELECT count(*) FROM ingestion_messages) AS messages,
       (SELECT count(*) FROM ingest_dedupe_keys) AS keys,
       (SELECT count(*) FROM device_telemetry_logs) AS telemetry,
       (SELECT count(*) FROM ingestion_stage_passes) AS passes
"""


def _receipt(h: Harness, seq: int) -> Receipt:
    body = orjson.dumps({"ts": 1000 + seq, "seq": seq, "values": good_values()})
    return Receipt.of(
        subject=h.names.telemetry_subject(TENANT, "d1", "state"),
        data=body,
        headers={"Nats-Msg-Id": f"ahead-{seq}"},
        stream_seq=seq,
        received_at_ns=time.time_ns(),
    )


async def _counts(h: Harness) -> tuple[int, ...]:
    async with h.pool.acquire() as conn:
        row = await conn.fetchrow(_COUNTS)
    assert row is not None
    return tuple(row.values())


async def test_rows_written_ahead_commit_after_the_publish_with_its_outcome(
    fleet: Harness,
) -> None:
    resources = await Resources.open(fleet.settings)
    try:
        pipeline = Pipeline(resources)
        evaluations, fates, gen = await pipeline.prepare([_receipt(fleet, 1), _receipt(fleet, 2)])
        hoped = {i: finalize(ev, _HOPED) for i, ev in enumerate(evaluations)}
        seen: list[tuple[int, ...]] = []

        async def settle() -> dict[int, Final] | None:
            seen.append(await _counts(fleet))  # another connection, mid-transaction
            return {i: finalize(ev, _DONE) for i, ev in enumerate(evaluations)}

        recorded = await pipeline.recorder.record_ahead(evaluations, fates, hoped, settle, gen=gen)
    finally:
        await resources.close()
    assert seen == [(0, 0, 0, 0)]
    assert recorded is not None
    assert recorded.statuses == {0: Status.COMPLETED, 1: Status.COMPLETED}
    assert await _counts(fleet) == (2, 2, 2, 1)
    async with fleet.pool.acquire() as conn:
        durations = await conn.fetchval("SELECT durations FROM ingestion_stage_passes")
        states = await conn.fetch("SELECT processing_state::text FROM device_telemetry_logs")
    assert durations[5::6] == [4321, 4321]  # the publish slot of each pass: the real outcome
    assert [r[0] for r in states] == ["processed", "processed"]


async def test_a_failed_publish_rolls_the_rows_written_ahead_back(fleet: Harness) -> None:
    resources = await Resources.open(fleet.settings)
    try:
        pipeline = Pipeline(resources)
        evaluations, fates, gen = await pipeline.prepare([_receipt(fleet, 3)])
        hoped = {0: finalize(evaluations[0], _HOPED)}

        async def settle() -> dict[int, Final] | None:
            return None  # a sink refused the batch

        recorded = await pipeline.recorder.record_ahead(evaluations, fates, hoped, settle, gen=gen)
        assert recorded is None
        assert await _counts(fleet) == (0, 0, 0, 0)
        # The caller then records the batch after its publish, as it always did.
        again = await pipeline.recorder.record_safely(evaluations, fates, hoped, gen=gen)
    finally:
        await resources.close()
    assert again.statuses == {0: Status.COMPLETED}
    assert await _counts(fleet) == (1, 1, 1, 1)
