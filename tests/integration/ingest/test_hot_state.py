"""Redis hot state keeps the newest *measurement*, whatever order envelopes arrive in."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from stages.ingest.plan import hot_state_order
from streams.ingest.hot_state import FAILED, NOT_NEWER, WRITTEN, HotItem, HotState
from tests.integration.ingest.conftest import Harness, good_values


async def test_a_late_older_envelope_never_overwrites_a_newer_one(fleet: Harness) -> None:
    await fleet.publish("d1", {"ts": 2_000, "seq": 2, "values": good_values(temp=22.0)})
    await fleet.consume(1)
    late = await fleet.publish("d1", {"ts": 1_000, "seq": 1, "values": good_values(temp=11.0)})
    await fleet.consume(2)
    assert (await fleet.message(late))["status"] == "completed"  # recorded and analysed...
    hot = await fleet.hot_state("d1")
    assert hot["state"]["seq"] == 2 and hot["state"]["values"]["temp_c"] == 22.0  # ...not hot
    assert await fleet.analytics_rows() == 20


async def test_newest_wins_inside_one_batch_and_ties_break_on_seq(fleet: Harness) -> None:
    for ts, seq, temp in [(5_000, 7, 1.0), (9_000, 1, 2.0), (9_000, 3, 3.0), (4_000, 9, 4.0)]:
        await fleet.publish("d2", {"ts": ts, "seq": seq, "values": good_values(temp=temp)})
    await fleet.consume(4)
    hot = await fleet.hot_state("d2")
    assert hot["state"]["values"]["temp_c"] == 3.0 and hot["state"]["seq"] == 3


async def test_concurrent_writers_cannot_regress_the_state(fleet: Harness) -> None:
    key = fleet.names.hot_state_key("acme", "race")
    writers = [HotState(aioredis.from_url(fleet.settings.redis())) for _ in range(4)]

    def item(ts: int) -> HotItem:
        return HotItem(
            key=key, topic="state", order=hot_state_order(ts, None), doc=b'{"ts": %d}' % ts
        )

    try:
        batches = [[item(ts) for ts in range(w, 400, 4)] for w in range(4)]
        await asyncio.gather(*(w.offer(b) for w, b in zip(writers, batches, strict=True)))
    finally:
        for w in writers:
            await w.client.aclose()
    state = await HotState(fleet.redis).read(key)
    assert state["state"] == {"ts": 399}


async def test_replaying_the_same_measurement_is_a_no_op_and_bad_keys_fail_alone(
    fleet: Harness,
) -> None:
    hot = HotState(fleet.redis)
    good = fleet.names.hot_state_key("acme", "g")
    bad = fleet.names.hot_state_key("acme", "b")
    await fleet.redis.set(bad, "not a hash")  # someone overwrote the key with a string
    items = [
        HotItem(key=good, topic="state", order=hot_state_order(10, 1), doc=b"{}"),
        HotItem(key=bad, topic="state", order=hot_state_order(10, 1), doc=b"{}"),
    ]
    assert await hot.offer(items) == [WRITTEN, FAILED]
    assert await hot.offer(items[:1]) == [NOT_NEWER]
