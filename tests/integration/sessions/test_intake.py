"""Intake: every handoff path ends in one run; the same upload twice makes one run."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
import orjson
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from streams.config import Settings
from streams.names import Names
from streams.objects import ObjectStore, artifact_key, sha256_hex
from streams.observability.metrics import Metrics
from streams.observability.observers import IntakeMetrics
from streams.sessions.intake import accept_notice
from streams.sessions.notice import NoticeArtifact, SessionNotice
from streams.sessions.upload import device_upload, store_file, upload_files
from tests.integration.ingest.test_dependency_down import Proxy
from tests.integration.sessions.conftest import running_intake, wait_until


async def _runs(pool: Any) -> list[Any]:
    async with pool.acquire() as conn:
        return list(
            await conn.fetch("SELECT id, session_id, status, idempotency_key FROM processing_runs")
        )


async def test_the_same_upload_twice_makes_one_run(
    settings: Settings, pool: Any, nmea_file: Path, tmp_path: Path
) -> None:
    # A copy under another name: same bytes, so the same artifact and the same set.
    other = tmp_path / "renamed.nmea"
    shutil.copy(nmea_file, other)
    async with running_intake(settings):
        first = await upload_files(settings, tenant="acme", device="car-7", paths=[nmea_file])
        runs = await wait_until(lambda: _runs(pool))
        second = await upload_files(settings, tenant="acme", device="car-7", paths=[other])
        assert second.session_id == first.session_id
        assert second.artifact_set_hash == first.artifact_set_hash
        # JetStream drops that second notice inside its duplicate window (same Nats-Msg-Id);
        # publish it once more under a fresh id so intake itself sees the repeat.
        nc = await nats.connect(settings.nats())
        try:
            notice = SessionNotice(artifacts=second.artifacts, requested_by="test")
            await nc.jetstream().publish(
                second.subject, notice.encode(), headers={"Nats-Msg-Id": "again"}
            )
        finally:
            await nc.close()
        await _drain(settings)
    runs = await _runs(pool)
    assert len(runs) == 1
    assert runs[0]["session_id"] == first.session_id
    assert runs[0]["idempotency_key"] == first.artifact_set_hash
    async with pool.acquire() as conn:
        jobs = await conn.fetch("SELECT name, state FROM jobs WHERE run_id = $1", runs[0]["id"])
        artifacts = await conn.fetch("SELECT sha256, storage_url, bytes FROM artifacts")
        linked = await conn.fetchval("SELECT count(*) FROM run_artifacts")
    assert {j["name"] for j in jobs} >= {"artifact_validate", "parse_raw", "publish_session"}
    assert {j["state"] for j in jobs if j["name"] == "artifact_validate"} == {"queued"}
    data = await asyncio.to_thread(nmea_file.read_bytes)
    assert [(a["sha256"], a["bytes"]) for a in artifacts] == [(sha256_hex(data), len(data))]
    assert linked == 1
    store = ObjectStore(settings.objects())
    assert store.read(store.key(artifacts[0]["storage_url"]), sha256=sha256_hex(data)) == data


async def _drain(settings: Settings) -> None:
    """Wait until the SESSIONS work queue is empty (every notice handled and acked)."""
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()

        async def empty() -> bool:
            info = await js.stream_info(names.sessions_stream)
            return info.state.messages == 0

        await wait_until(empty)
    finally:
        await nc.close()


async def test_accept_is_idempotent_and_order_independent(
    settings: Settings, pool: Any, tmp_path: Path
) -> None:
    store = ObjectStore(settings.objects())
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_bytes(b"ts,lat_deg,lon_deg\n")
    b.write_bytes(b"ts,ax_mps2\n")
    arts = [store_file(store, "acme", p, max_bytes=1 << 20) for p in (a, b)]
    one = await accept_notice(
        settings,
        pool,
        store,
        tenant="acme",
        device="d1",
        notice=SessionNotice(artifacts=tuple(arts)),
    )
    two = await accept_notice(
        settings,
        pool,
        store,
        tenant="acme",
        device="d1",
        notice=SessionNotice(artifacts=tuple(reversed(arts))),
    )
    assert one.created and not two.created
    assert (two.session_id, two.run_id) == (one.session_id, one.run_id)
    # The same bytes in another tenant are another artifact, session and run.
    other = await accept_notice(
        settings,
        pool,
        store,
        tenant="globex",
        device="d1",
        notice=SessionNotice(
            artifacts=tuple(store_file(store, "globex", p, max_bytes=1 << 20) for p in (a, b))
        ),
    )
    assert other.created and other.session_id != one.session_id
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM processing_runs") == 2
        assert await conn.fetchval("SELECT count(*) FROM artifacts") == 4
        positions = await conn.fetch(
            "SELECT a.sha256 FROM run_artifacts ra JOIN artifacts a ON a.id = ra.artifact_id"
            " WHERE ra.run_id = $1 ORDER BY ra.position",
            one.run_id,
        )
    assert [p["sha256"] for p in positions] == sorted(x.sha256 for x in arts)


async def test_device_bucket_upload_becomes_a_run(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    data = await asyncio.to_thread(nmea_file.read_bytes)
    async with running_intake(settings):
        await device_upload(
            settings, tenant="acme", device="buoy-1", name="2026-03-01.nmea", data=data
        )
        runs = await wait_until(lambda: _runs(pool))
    assert len(runs) == 1
    store = ObjectStore(settings.objects())
    assert store.read(artifact_key("acme", sha256_hex(data)), sha256=sha256_hex(data)) == data
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT a.filename, d.external_id FROM artifacts a"
            " JOIN sessions s ON s.id = a.session_id JOIN devices d ON d.id = s.device_id"
        )
    assert (row["filename"], row["external_id"]) == ("2026-03-01.nmea", "buoy-1")


async def test_a_bad_notice_is_dead_lettered_not_lost(settings: Settings, pool: Any) -> None:
    names = Names(namespace=settings.namespace)
    missing = NoticeArtifact(name="ghost.nmea", sha256="ab" * 32, size=10)
    async with running_intake(settings):
        nc = await nats.connect(settings.nats())
        try:
            js = nc.jetstream()
            await js.publish(names.sessions_subject("acme", "d1"), b"{not json")
            await js.publish(
                names.sessions_subject("acme", "d2"), SessionNotice(artifacts=(missing,)).encode()
            )
            sub = await js.pull_subscribe(
                names.sessions_dead_letter_subjects, stream=names.sessions_dead_letter_stream
            )
            msgs: list[Any] = []
            while len(msgs) < 2:
                msgs += await sub.fetch(2 - len(msgs), timeout=10)
            bodies = sorted((orjson.loads(m.data) for m in msgs), key=lambda b: b["subject"])
        finally:
            await nc.close()
        await _drain(settings)
    assert [b["code"] for b in bodies] == ["BAD_NOTICE", "ARTIFACT_MISSING"]
    assert bodies[0]["notice"] == "{not json"
    for body in bodies:  # spec 003's fields: refused on the first delivery, no stack to show
        assert (body["error_type"], body["retry_count"], body["deliveries"]) == ("permanent", 0, 1)
        assert body["stack_trace"] is None
        first, last = (datetime.fromisoformat(body[k]) for k in ("first_seen_at", "last_seen_at"))
        assert first.tzinfo is not None and first <= last
    assert await _runs(pool) == []


async def test_a_notice_that_keeps_failing_ends_in_the_dlq(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    """A crash (here: intake's Postgres pool is gone) is retried, then dead-lettered, not lost.

    A closed pool is a bug, not an outage (that is the next test): it has the delivery budget
    ``consumer.max_deliver`` of ``stages.ack_policy``'s ``RETRY``."""
    from streams.adapters import postgres
    from streams.sessions import intake

    names = Names(namespace=settings.namespace)
    metrics = Metrics(process=False)
    await intake.provision_sessions(settings)
    receipt = await upload_files(settings, tenant="acme", device="d9", paths=[nmea_file])
    settings = _quick(settings, max_deliver=2)  # the delivery budget of a RETRY
    broken = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=1))
    await broken.close()
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()
        ctx = intake._Intake(
            settings=settings,
            names=names,
            pool=broken,
            store=ObjectStore(settings.objects()),
            js=js,
            observer=IntakeMetrics(metrics),
        )
        sub = await js.pull_subscribe_bind(names.intake_durable, stream=names.sessions_stream)
        first = (await sub.fetch(1, timeout=5))[0]
        await intake._handle(ctx, first)  # delivery 1: nak with backoff
        assert metrics.registry.get_sample_value(
            "tideway_session_dead_letters_total", {"code": "INTAKE_CRASHED"}) is None
        second = (await sub.fetch(1, timeout=10))[0]
        assert second.metadata.num_delivered == 2
        await intake._handle(ctx, second)  # delivery 2 = the last: dead-lettered
        dlq = await js.pull_subscribe(
            names.sessions_dead_letter_subjects, stream=names.sessions_dead_letter_stream
        )
        dead = orjson.loads((await dlq.fetch(1, timeout=5))[0].data)
    finally:
        await nc.close()
    assert dead["code"] == "INTAKE_CRASHED"
    assert dead["subject"] == receipt.subject
    assert orjson.loads(dead["notice"])["artifacts"][0]["sha256"] == receipt.artifacts[0].sha256
    # Spec 003's fields: retried once, then given up; the stack is class and places only.
    assert (dead["error_type"], dead["retry_count"], dead["deliveries"]) == ("transient", 1, 2)
    first, last = (datetime.fromisoformat(dead[k]) for k in ("first_seen_at", "last_seen_at"))
    assert first < last  # stored at upload, dead-lettered a redelivery later
    trace = dead["stack_trace"].splitlines()
    assert trace[0].isidentifier()  # the exception's class, never its text
    assert any(line.startswith("  streams.sessions.intake:") for line in trace[1:])
    assert all(re.fullmatch(r"  [\w.<>]+:\d+ \([\w<>]+\)", line) for line in trace[1:])
    assert metrics.registry.get_sample_value(
        "tideway_session_dead_letters_total", {"code": "INTAKE_CRASHED"}) == 1
    assert await _runs(pool) == []


async def test_job_max_attempts_setting_reaches_the_planned_jobs(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    configured = settings.model_copy(
        update={"retry": settings.retry.model_copy(update={"job_max_attempts": 6})}
    )
    async with running_intake(configured):
        await upload_files(configured, tenant="acme", device="car-7", paths=[nmea_file])
        runs = await wait_until(lambda: _runs(pool))
    async with pool.acquire() as conn:
        jobs = await conn.fetch("SELECT name, max_attempts FROM jobs WHERE run_id = $1",
                                runs[0]["id"])  # type: ignore[index]
    attempts = {j["name"]: j["max_attempts"] for j in jobs}
    assert attempts.pop("fuse_gnss_imu") == 1  # the DAG's own limit wins
    assert set(attempts.values()) == {6}


def _quick(settings: Settings, *, max_deliver: int = 10) -> Settings:
    """``settings`` with short nak delays (0.05 s, doubling up to 0.2 s: the shared backoff's
    knobs) and a ``consumer.max_deliver`` budget, so redeliveries come within the test."""
    retry = settings.retry.model_copy(
        update={"redelivery_delay_s": 0.05, "redelivery_cap_s": 0.2}
    )
    consumer = settings.consumer.model_copy(update={"max_deliver": max_deliver})
    return settings.model_copy(update={"retry": retry, "consumer": consumer})


async def _dead_letters(settings: Settings) -> int:
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    try:
        info = await nc.jetstream().stream_info(names.sessions_dead_letter_stream)
    finally:
        await nc.close()
    return int(info.state.messages)


@pytest.fixture
async def pg_proxy(settings: Settings) -> AsyncIterator[Proxy]:
    """A TCP proxy in front of this test's Postgres that the test can shut down and restore."""
    parts = urlsplit(settings.postgres())
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def test_a_postgres_outage_defers_notices_past_any_delivery_budget(
    settings: Settings, pool: Any, nmea_file: Path, pg_proxy: Proxy
) -> None:
    """Intake's Postgres goes away: its notice is nak'ed with backoff for as long as that lasts
    (here well past ``consumer.max_deliver``), never dead-lettered, and becomes its run once
    Postgres is back."""
    names = Names(namespace=settings.namespace)
    dsn = urlsplit(settings.postgres())
    via_proxy = urlunsplit(dsn._replace(netloc=f"{dsn.username}@127.0.0.1:{pg_proxy.port}"))
    quick = _quick(settings, max_deliver=2).with_services(postgres_dsn=via_proxy)
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()

        async def deliveries() -> int:
            info = await js.consumer_info(names.sessions_stream, names.intake_durable)
            return int(info.delivered.consumer_seq)

        async def connected() -> bool:
            return bool(pg_proxy.upstream_ports)

        async with running_intake(quick):
            await wait_until(connected)  # intake has its pool
            await pg_proxy.shut_down(pool)  # Postgres is now unreachable for intake
            await upload_files(settings, tenant="acme", device="d5", paths=[nmea_file])
            await wait_until(lambda: _at_least(deliveries, 5), within=20)
            assert await _runs(pool) == []
            assert await _dead_letters(settings) == 0  # an outage is not the notice's fault
            pg_proxy.up = True  # back again
            runs = await wait_until(lambda: _runs(pool), within=20)
            await _drain(settings)
    finally:
        await nc.close()
    assert len(runs) == 1  # type: ignore[arg-type]
    assert await _dead_letters(settings) == 0


async def _at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


async def test_a_notice_whose_dead_letter_is_not_stored_is_kept(
    settings: Settings, pool: Any
) -> None:
    """Terminating a notice whose dead letter was lost would drop it: it is nak'ed instead and
    dead-lettered (then terminated) on a later delivery, once SESSIONS_DLQ takes it."""
    from streams.sessions import intake

    quick = _quick(settings)
    names = Names(namespace=settings.namespace)
    await intake.provision_sessions(quick)
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()
        await js.delete_stream(names.sessions_dead_letter_stream)  # nowhere to dead-letter
        await js.publish(names.sessions_subject("acme", "d1"), b"{not json")
        ctx = intake._Intake(
            settings=quick, names=names, pool=pool, store=ObjectStore(quick.objects()), js=js
        )
        sub = await js.pull_subscribe_bind(names.intake_durable, stream=names.sessions_stream)
        first = (await sub.fetch(1, timeout=5))[0]
        await intake._handle(ctx, first)  # the dead letter fails: nak'ed, not terminated
        second = (await sub.fetch(1, timeout=10))[0]
        assert second.metadata.num_delivered == 2
        assert second.data == b"{not json"
        await intake.provision_sessions(quick)  # SESSIONS_DLQ is back
        await intake._handle(ctx, second)
        dlq = await js.pull_subscribe(
            names.sessions_dead_letter_subjects, stream=names.sessions_dead_letter_stream
        )
        dead = [orjson.loads(m.data) for m in await dlq.fetch(1, timeout=5)]
    finally:
        await nc.close()
    assert [d["code"] for d in dead] == ["BAD_NOTICE"]
    assert dead[0]["notice"] == "{not json"
    await _drain(settings)  # terminated: nothing left on the work queue


async def test_provisioning_lifts_a_delivery_limit_left_by_an_older_version(
    settings: Settings,
) -> None:
    """A consumer made with ``max_deliver=20`` (as intake once made it) would stop delivering a
    notice after 20 deliveries of an outage, leaving it stuck on the work queue; provisioning
    updates it in place to no limit, and doing so again changes nothing."""
    from streams.sessions import intake

    names = Names(namespace=settings.namespace)
    await intake.provision_sessions(settings)
    nc = await nats.connect(settings.nats())
    try:
        js = nc.jetstream()
        old = ConsumerConfig(
            durable_name=names.intake_durable, ack_policy=AckPolicy.EXPLICIT,
            ack_wait=intake.ACK_WAIT_S, max_deliver=20, filter_subject=names.sessions_subjects,
        )
        await js.add_consumer(names.sessions_stream, old)
        info = await js.consumer_info(names.sessions_stream, names.intake_durable)
        assert info.config.max_deliver == 20
        await intake.provision_sessions(settings)
        await intake.provision_sessions(settings)
        info = await js.consumer_info(names.sessions_stream, names.intake_durable)
    finally:
        await nc.close()
    assert info.config.max_deliver == -1
