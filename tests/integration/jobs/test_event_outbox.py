"""Events that cannot lie (issue 27, spec 003 "transactional outbox"), on real Postgres and NATS.

Each change of a run or a session's pointer writes its event in its own transaction; the relay
moves the outbox to the EVENTS stream in order, at least once, through NATS outages, relay
deaths and two relays at once; a change that did not commit is never announced.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import nats
import orjson
import pytest

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from streams.adapters import postgres
from streams.config import Settings
from streams.domain_events import EventRelay
from streams.domain_events.relay import LEADER_LOCK, ROUND_LOCK
from streams.jobs import queue
from streams.jobs.model import JobResult
from streams.names import Names
from tests.integration.ingest.test_dependency_down import PrivateNats
from tests.integration.jobs.conftest import CH, Owner, start_run

ONE_JOB = {"only": JobSpec(name="only", job_type="noop")}


async def _events_of(conn: asyncpg.Connection, run_id: uuid.UUID) -> list[str]:
    rows = await conn.fetch(
        "SELECT kind FROM event_outbox WHERE run_id = $1 AND kind LIKE 'run.%' ORDER BY id",
        run_id,
    )
    return [r["kind"] for r in rows]


async def _stream(settings: Settings) -> list[tuple[str | None, dict[str, Any]]]:
    """Every message of the EVENTS stream: its Nats-Msg-Id and body, in stream order."""
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()
        info = await js.stream_info(names.events_stream)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(names.events_stream, seq)
            out.append(((msg.headers or {}).get("Nats-Msg-Id"), orjson.loads(msg.data or b"{}")))
        return out
    finally:
        await nc.close()


class Recorder:
    """A RelayObserver that keeps what it is told."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.backlog: list[float] = []

    def on_relayed(self, *, delays_s: Sequence[float]) -> None:
        self.delays.extend(delays_s)

    def on_backlog(self, *, age_s: float) -> None:
        self.backlog.append(age_s)


async def _drain(relay: EventRelay) -> int:
    total = 0
    while (done := await relay.relay_round()).relayed:
        total += done.relayed
    return total


async def test_each_change_writes_its_event_in_its_own_transaction(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    run_id = await start_run(conn, owner, dag=ONE_JOB)
    assert await _events_of(conn, run_id) == ["run.pending"]
    # A cancel whose transaction rolls back announces nothing.
    with pytest.raises(RuntimeError):
        async with conn.transaction():
            await queue.cancel_run(conn, run_id, channel=CH, dag=DEFAULT_DAG)
            raise RuntimeError("the caller gave up")
    assert await conn.fetchval("SELECT status FROM processing_runs WHERE id = $1",
                               run_id) == "pending"  # fmt: skip
    assert await _events_of(conn, run_id) == ["run.pending"]
    # Claimed (running), then completed: the last job finalises the run, which moves the
    # session's pointer - both events in that completion's transaction.
    [job] = await queue.claim(conn, worker_id="w", limit=1, tenant_max_running=8,
                              heavy_max_running=8)  # fmt: skip
    assert await _events_of(conn, run_id) == ["run.pending", "run.running"]
    await queue.complete(conn, job, JobResult(), channel=CH, dag=DEFAULT_DAG)
    assert await _events_of(conn, run_id) == ["run.pending", "run.running", "run.succeeded"]
    published = await conn.fetch(
        "SELECT run_id, fields FROM event_outbox WHERE session_id = $1"
        " AND kind = 'session.published'", owner.session_id)
    assert [(r["run_id"], r["fields"]["previous_run_id"]) for r in published] == [(run_id, None)]
    # The relay sends them in that order, each body naming the change.
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=1))
    relay = EventRelay(settings, pool)
    try:
        assert await _drain(relay) == 4
    finally:
        await relay.aclose()
        await pool.close()
    bodies = [b for _, b in await _stream(settings)]
    # The completion's statement ends the run, then moves the pointer: its two events keep
    # that order.
    assert [b["type"] for b in bodies if b["run_id"] == str(run_id)] == [
        "run.pending", "run.running", "run.succeeded", "session.published"
    ]
    ran = [b for b in bodies if b["type"].startswith("run.")]
    assert [b["status"] for b in ran] == ["pending", "running", "succeeded"]
    assert all(b["tenant"] == "acme" and b["session_id"] == str(owner.session_id) for b in bodies)
    assert [b["id"] for b in bodies] == sorted(b["id"] for b in bodies)


async def test_a_completion_refused_by_a_cancel_is_never_announced(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """The cancel race: a worker finishes the job after the operator cancelled its run. The
    completion is refused, so no ``run.succeeded`` or ``session.published`` may exist - the
    old code published ``session.published`` before that completion was decided."""
    run_id = await start_run(conn, owner, dag=ONE_JOB)
    [job] = await queue.claim(conn, worker_id="w", limit=1, tenant_max_running=8,
                              heavy_max_running=8)  # fmt: skip
    await queue.cancel_run(conn, run_id, channel=CH, dag=DEFAULT_DAG)
    await queue.complete(conn, job, JobResult(), channel=CH, dag=DEFAULT_DAG)
    status = await conn.fetchval("SELECT status FROM processing_runs WHERE id = $1", run_id)
    assert status == "cancelled"
    assert await _events_of(conn, run_id) == ["run.pending", "run.running", "run.cancelled"]
    assert await conn.fetchval(
        "SELECT count(*) FROM event_outbox WHERE kind = 'session.published'") == 0


async def test_events_wait_out_a_nats_outage_and_arrive_once_in_order(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, tmp_path: Path
) -> None:
    """NATS killed while runs change: nothing is lost, nothing doubled, each run's events in
    the order they committed; the backlog's age is reported meanwhile and falls to 0."""
    server = PrivateNats(tmp_path)
    await server.start()
    private = settings.with_services(nats_url=server.url)
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=2))
    recorder = Recorder()
    relay = EventRelay(private.model_copy(update={"events": private.events.model_copy(
        update={"relay_poll_s": 0.2})}), pool, observer=recorder)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        runs = [await start_run(conn, owner, dag=ONE_JOB) for _ in range(5)]
        await _until(lambda: _unrelayed(conn), 0)
        assert server.proc is not None
        server.proc.kill()  # kill -9: no goodbye
        server.proc.wait(10)
        server.proc = None
        for run_id in runs[:3]:
            await queue.cancel_run(conn, run_id, channel=CH, dag=DEFAULT_DAG)
        runs += [await start_run(conn, owner, dag=ONE_JOB) for _ in range(20)]
        # The relay keeps trying meanwhile, and each round it finishes reports the backlog's
        # age. A round waits out its publish timeout against the dead server first, so on a
        # loaded machine the first report past 1 s can come well after 2 s (CI: none within 2 s).
        async def reported_past_1s() -> bool:
            return bool(recorder.backlog) and recorder.backlog[-1] > 1.0

        await _until(reported_past_1s, True, within_s=15)
        assert await _unrelayed(conn) == 23  # nothing was relayed to the dead server
        await server.start()
        await _until(lambda: _unrelayed(conn), 0, within_s=30)
        await asyncio.sleep(0.5)  # one more round reports the empty backlog
        assert recorder.backlog[-1] == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        await pool.close()
    stream = await _stream(private)
    server.stop()
    ids = [body["id"] for _, body in stream]
    expected = [r["id"] for r in await conn.fetch("SELECT id FROM event_outbox ORDER BY id")]
    assert ids == expected  # every event, once, in outbox order
    assert [mid for mid, _ in stream] == [f"{settings.namespace}:event:{i}" for i in ids]
    for run_id in runs[:3]:
        assert [b["type"] for _, b in stream if b["run_id"] == str(run_id)] == [
            "run.pending", "run.cancelled"]
    assert len(recorder.delays) == len(ids) and max(recorder.delays) > 1.5


async def test_a_relay_that_dies_before_stamping_sends_again_and_the_stream_keeps_one(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    for _ in range(3):
        await start_run(conn, owner, dag=ONE_JOB)
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=1))
    relay = EventRelay(settings, pool)
    try:
        assert await _drain(relay) == 3
        # What a relay killed between its publishes and its commit leaves: published events
        # that Postgres still holds as not relayed.
        await conn.execute("UPDATE event_outbox SET relayed_at = NULL")
        assert await _drain(relay) == 3
    finally:
        await relay.aclose()
        await pool.close()
    ids = [body["id"] for _, body in await _stream(settings)]
    assert len(ids) == 3 and len(set(ids)) == 3


class LosingRelay(EventRelay):
    """A relay whose publish of one event fails once, mid-round, as a NATS timeout: the
    message never reached the stream (``stored=False``) or it did and only its
    acknowledgement was lost (``stored=True``)."""

    def __init__(self, *args: Any, lose: int, stored: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lose: int | None = lose
        self.stored = stored

    async def _send(self, js: Any, row: Any, after: int | None) -> Any:
        if row["id"] == self.lose:
            self.lose = None
            if self.stored:
                await super()._send(js, row, after)
            raise nats.errors.TimeoutError
        return await super()._send(js, row, after)


@pytest.mark.parametrize("stored", [False, True], ids=["lost", "ack-lost"])
async def test_a_publish_lost_mid_round_never_lets_a_later_event_ahead(
    settings: Settings, conn: asyncpg.Connection, owner: Owner, stored: bool
) -> None:
    """The round's publishes are pipelined. When one goes missing in the middle, the events
    after it are refused by the stream (each expects the one before it) instead of stored ahead
    of it; the round stamps only what came before, and the next round sends the rest: the
    stream holds every event once, in outbox order. When the lost publish was stored and only
    its acknowledgement went missing, the events after it were stored too and come back as
    duplicates."""
    for _ in range(8):
        await start_run(conn, owner, dag=ONE_JOB)
    ids = [r["id"] for r in await conn.fetch("SELECT id FROM event_outbox ORDER BY id")]
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=1))
    relay = LosingRelay(settings, pool, lose=ids[3], stored=stored)
    try:
        first = await relay.relay_round()
        assert (first.relayed, first.failed) == (3, "TimeoutError: nats: timeout")
        assert await _unrelayed(conn) == len(ids) - 3
        in_stream = [body["id"] for _, body in await _stream(settings)]
        assert in_stream == (ids if stored else ids[:3])
        assert await _drain(relay) == len(ids) - 3
    finally:
        await relay.aclose()
        await pool.close()
    stream = await _stream(settings)
    assert [body["id"] for _, body in stream] == ids  # every event, once, in outbox order
    assert [mid for mid, _ in stream] == [f"{settings.namespace}:event:{i}" for i in ids]


async def test_one_relay_leads_and_a_new_leader_follows_a_lost_one(
    settings: Settings, conn: asyncpg.Connection, owner: Owner
) -> None:
    """Two workers' relays: one leads and sends everything, once, in order; when its
    connection dies, a relay takes the lead again within a poll and nothing is lost or
    doubled. A round never runs while another holds the round's lock."""
    fast = settings.model_copy(update={"events": settings.events.model_copy(
        update={"relay_batch": 7, "relay_poll_s": 0.1})})
    pools = [await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=2))
             for _ in range(2)]
    relays = [EventRelay(fast, p) for p in pools]
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [asyncio.create_task(r.run(s)) for r, s in zip(relays, stops, strict=True)]
    try:
        for _ in range(100):
            await start_run(conn, owner, dag=ONE_JOB)
        await _until(lambda: _unrelayed(conn), 0, within_s=30)
        leader = await _leader(conn)
        assert leader is not None  # one relay holds the leader's lock
        # The leader's connection dies (as with its process): the lock goes with it.
        await conn.execute("SELECT pg_terminate_backend($1)", leader)
        for _ in range(100):
            await start_run(conn, owner, dag=ONE_JOB)
        await _until(lambda: _unrelayed(conn), 0, within_s=30)
        successor = await _leader(conn)
        assert successor is not None and successor != leader
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(*tasks)
        for p in pools:
            await p.close()
    ids = [body["id"] for _, body in await _stream(settings)]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == 200
    # A round never overlaps another: while one holds the round's lock, a second relays
    # nothing; once it is free, the second relays everything, once.
    for _ in range(50):
        await start_run(conn, owner, dag=ONE_JOB)
    pool = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=1))
    relay = EventRelay(fast, pool)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", ROUND_LOCK)
            held = await relay.relay_round()
        assert (held.leader, held.relayed) == (False, 0)
        assert await _drain(relay) == 50
    finally:
        await relay.aclose()
        await pool.close()
    ids = [body["id"] for _, body in await _stream(settings)]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == 250


async def _leader(conn: asyncpg.Connection) -> int | None:
    """The backend pid holding the relay leader's lock."""
    return await conn.fetchval(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND ((classid::bigint << 32) | objid::bigint) = $1", LEADER_LOCK)


async def _unrelayed(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM event_outbox WHERE relayed_at IS NULL"))


async def _until(probe: Any, value: int, *, within_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while (got := await probe()) != value:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"still {got}, waiting for {value}")
        await asyncio.sleep(0.05)
