"""Clustered NATS, proven: a three-node JetStream cluster on loopback, R3 streams made by
``provision``, a steady publish through a running ingest consumer, and the TELEMETRY stream's
leader node ``kill -9``'d mid-run. Nothing is lost, nothing is recorded or applied twice, ingest
carries on over the remaining nodes without a restart, and sessions uploaded after the kill —
one through the object-store bucket, one through the artifact store — still become runs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from nats import errors as nats_errors
from nats.js import errors as js_errors

from stages.ingest.ingress import key_hash
from streams.adapters.nats import connect_nats
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.ingest.consumer import run_consumer
from streams.ingest.provision import provision
from streams.names import Names
from streams.sessions.intake import provision_sessions, run_intake
from streams.sessions.upload import device_upload, upload_files
from tests.integration.ingest.conftest import TENANT, fast_settings, good_values, seed_fleet
from tests.integration.nats_security.servers import Cluster, start_cluster
from tests.integration.sessions.conftest import NMEA_LOG
from tests.shared_data import data_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ENVELOPES = 2_000
SPREAD_S = 10.0
DEVICES = ("d1", "d2")
PARAMETERS_PER_ENVELOPE = 10  # the demo schema's analytics rows for good_values()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = start_cluster(tmp_path / "cluster")
    try:
        yield started
    finally:
        started.stop()


async def _until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the cluster is electing: ask again
            found = await check()
            if found:
                return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def _publish_steadily(settings: Settings, names: Names, sent: list[str]) -> None:
    """``ENVELOPES`` envelopes over ``SPREAD_S`` seconds, each retried under its own
    ``Nats-Msg-Id`` until JetStream acknowledges it (as a device would)."""
    nc = await connect_nats(settings.nats, name="tideway-test-publisher")
    js = nc.jetstream(timeout=2)
    try:
        start = time.monotonic()
        for i in range(ENVELOPES):
            await asyncio.sleep(max(0.0, start + i * SPREAD_S / ENVELOPES - time.monotonic()))
            key = f"c-{i}"
            device = DEVICES[i % len(DEVICES)]
            body = orjson.dumps({"ts": 1_000 + i // len(DEVICES), "seq": i,
                                 "values": good_values(temp=float(i % 40))})
            while True:
                try:
                    await js.publish(names.telemetry_subject(TENANT, device, "state"), body,
                                     headers={"Nats-Msg-Id": key})
                    break
                except (nats_errors.Error, js_errors.Error, TimeoutError, OSError):
                    await asyncio.sleep(0.1)  # the leader is gone: the stream re-elects
            sent.append(key)
    finally:
        await nc.close()


async def test_ingest_and_uploads_survive_the_stream_leader_being_killed(
    cluster: Cluster, settings: Settings, pg_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    settings = fast_settings(settings.with_services(nats_url=cluster.url))
    settings = settings.model_copy(update={
        "stream": settings.stream.model_copy(update={"replicas": 3}),
        "consumer": settings.consumer.model_copy(update={"ack_wait_s": 5.0}),
    })
    names = Names(namespace=settings.namespace)
    async def provisioned() -> bool:
        await provision(settings)  # returns warnings, none expected here
        return True

    async def sessions_provisioned() -> bool:
        await provision_sessions(settings)  # idempotent; an R3 create may time out while the
        return True  # cluster is busy (seen once under CI load: "cannot provision SESSIONS")

    await _until(provisioned, 30, "the cluster to accept R3 streams")
    await _until(sessions_provisioned, 30, "the cluster to accept the session streams")
    async with pg_pool.acquire() as conn:
        await seed_fleet(conn, TENANT, active=list(DEVICES))

    admin = await connect_nats(settings.nats, name="tideway-test-admin")
    js = admin.jetstream(timeout=2)
    info = await js.stream_info(names.telemetry_stream)
    assert info.config.num_replicas == 3 and info.cluster is not None
    assert len(info.cluster.replicas or []) == 2
    assert (await js.stream_info(names.dead_letter_stream)).config.num_replicas == 3
    assert (await js.stream_info(names.sessions_stream)).config.num_replicas == 3
    bucket = await js.object_store(names.session_bucket)
    assert (await bucket.status()).stream_info.config.num_replicas == 3

    stop = asyncio.Event()
    consumer = asyncio.create_task(run_consumer(settings, stop=stop))
    intake = asyncio.create_task(run_intake(settings, stop=stop))
    sent: list[str] = []
    publisher = asyncio.create_task(_publish_steadily(settings, names, sent))
    try:
        await _until(lambda: asyncio.sleep(0, len(sent) >= ENVELOPES // 3), 30, "a third sent")
        leader = await _leader(js, names.telemetry_stream)
        assert leader is not None
        killed = cluster.by_name(leader)
        killed.kill()
        await admin.close()
        admin = await connect_nats(settings.nats, name="tideway-test-admin")
        js = admin.jetstream(timeout=2)

        async def new_leader() -> str | None:
            found = await _leader(js, names.telemetry_stream)
            return found if found and found != leader else None

        await _until(new_leader, 30, "a new TELEMETRY leader")
        # A session uploaded through the object-store bucket while the cluster is one node down.
        nmea = data_file("nmea", NMEA_LOG)
        data = await asyncio.to_thread(nmea.read_bytes)
        await _until(lambda: _upload(settings, data), 30, "the upload to be accepted")
        # And one through `tideway sessions upload`'s path (artifact store + SESSIONS notice).
        # (other bytes: the same ones would be the same artifact set, hence the same run)
        other = tmp_path / "second.nmea"
        other.write_bytes(data + b"\n")
        await upload_files(settings, tenant=TENANT, device="car-8", paths=[other])
        await asyncio.wait_for(publisher, 60)

        async def all_recorded() -> bool:
            async with pg_pool.acquire() as conn:
                done = await conn.fetchval(
                    "SELECT count(*) FROM ingestion_messages WHERE status = 'completed'")
            return bool(done >= ENVELOPES)

        await _until(all_recorded, 60, f"{ENVELOPES} envelopes recorded")

        async def both_runs() -> bool:
            async with pg_pool.acquire() as conn:
                return bool(await conn.fetchval("SELECT count(*) FROM processing_runs") >= 2)

        await _until(both_runs, 30, "intake to create the uploaded sessions' runs")
        assert not consumer.done() and not intake.done()  # no restart: they carried on
    finally:
        stop.set()
        publisher.cancel()
        with contextlib.suppress(BaseException):
            await publisher
        await asyncio.wait_for(asyncio.gather(consumer, intake, return_exceptions=True), 20)
        await admin.close()

    assert sorted(sent) == sorted(f"c-{i}" for i in range(ENVELOPES))
    async with pg_pool.acquire() as conn:
        completed = await conn.fetch(
            "SELECT source_deduplication_key AS key FROM ingestion_messages"
            " WHERE status = 'completed'")
        statuses = await conn.fetch(
            "SELECT status, count(*) AS n FROM ingestion_messages GROUP BY status")
        telemetry = await conn.fetchval("SELECT count(*) FROM device_telemetry_logs")
        runs = await conn.fetchval("SELECT count(*) FROM processing_runs")
    keys = [row["key"].hex for row in completed]  # the keys' digests (migration 0020)
    counts = {row["status"]: row["n"] for row in statuses}
    # 0 lost, 0 recorded twice: every published id completed exactly once (a copy JetStream
    # stored twice would be a 'duplicate' row pointing at it, never a second completion).
    assert len(keys) == len(set(keys)) == ENVELOPES, counts
    assert set(keys) == {key_hash(f"m:{TENANT}:{key}") for key in sent}  # keys are per tenant
    assert set(counts) <= {"completed", "duplicate"}, counts
    # 0 effects applied twice: one telemetry row and one set of analytics rows per envelope.
    assert telemetry == ENVELOPES
    clickhouse = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
    rows = await clickhouse.query_rows(
        f"SELECT count() FROM {settings.clickhouse_database}.{names.analytics_table} FINAL")
    assert int(rows[0][0]) == ENVELOPES * PARAMETERS_PER_ENVELOPE
    assert runs == 2  # one per upload, none twice


async def _leader(js: Any, stream: str) -> str | None:
    """The name of the node leading ``stream`` (its ``server_name``: n1, n2 or n3)."""
    cluster = (await js.stream_info(stream)).cluster
    return cluster.leader if cluster is not None else None


async def _upload(settings: Settings, data: bytes) -> bool:
    await device_upload(settings, tenant=TENANT, device="car-7", name="2026-03-01.nmea",
                        data=data)
    return True
