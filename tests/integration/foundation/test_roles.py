"""Each process works with its own Postgres role, and no role reaches what it is not for
(migration 0022, docs/security.md "Postgres roles"). A bug in one query or one process can no
longer delete telemetry from the API, or touch the job queue from the ingest consumer.

Each role is taken by the test's login at connection start (the DSN's ``role`` parameter, as
a deployment's login would be a member of it); the test's login itself is a superuser, so
every refusal here is the role's, not the login's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from stages.batch import formats
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG
from streams.adapters import postgres
from streams.config import Settings
from streams.identity import credentials
from streams.jobs.worker import run_worker
from streams.retention.maintain import maintain_once
from streams.sessions.progress import wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from tests.integration.ingest.conftest import TENANT, Harness, fleet, good_values, harness
from tests.integration.sessions.conftest import running_intake

__all__ = ["fleet", "harness"]  # the ingest fixtures, used here

ROLES = ("ingest", "intake", "worker", "api", "auth", "maintenance")


def as_role(dsn: str, role: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}role=tideway_{role}"


def role_settings(settings: Settings, role: str, *, maintenance: bool = False) -> Settings:
    """``settings`` whose Postgres connections take ``role`` (and the maintenance role for
    partition upkeep, as a deployment's ingest pod does)."""
    dsn = settings.postgres()
    update: dict[str, Any] = {"postgres_dsn": as_role(dsn, role)}
    if maintenance:
        update["postgres_maintenance_dsn"] = as_role(dsn, "maintenance")
    return settings.with_services(**update)


@contextlib.asynccontextmanager
async def role_conn(dsn: str, role: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await postgres.connect(as_role(dsn, role))
    try:
        yield conn
    finally:
        await conn.close()


# role -> statements it must be refused (each alone; every table here exists and has rows
# or not - the refusal comes before any row is looked at).
REFUSED: dict[str, list[str]] = {
    "api": [
        "DELETE FROM device_telemetry_logs",
        "DELETE FROM ingestion_messages",
        "UPDATE device_telemetry_logs SET processing_state = 'processed'",
        "INSERT INTO ingest_dedupe_keys (key_hash, gen, message_id, received_at)"
        " VALUES (gen_random_uuid(), 0, 1, now())",
        "DELETE FROM dead_letters",
        "DELETE FROM devices",
        "DELETE FROM jobs",
        "TRUNCATE api_keys",
        "UPDATE api_keys SET revoked_at = now()",
        "SELECT count(*) FROM event_outbox",
        "INSERT INTO event_outbox (tenant_id, kind) VALUES (gen_random_uuid(), 'run.failed')",
    ],
    "ingest": [
        "SELECT count(*) FROM jobs",
        "UPDATE jobs SET state = 'queued'",
        "INSERT INTO processing_runs (id) VALUES (gen_random_uuid())",
        "SELECT count(*) FROM api_keys",
        "SELECT count(*) FROM device_credentials",
        "DELETE FROM dead_letters",
        "DELETE FROM device_telemetry_logs",
        "CREATE TABLE ingestion_messages_p29990101 PARTITION OF ingestion_messages"
        " FOR VALUES FROM ('2999-01-01') TO ('2999-01-02')",
    ],
    "intake": [
        "SELECT count(*) FROM api_keys",
        "SELECT count(*) FROM device_telemetry_logs",
        "DELETE FROM sessions",
        "UPDATE dead_letters SET state = 'resolved'",
        "INSERT INTO event_outbox (tenant_id, kind) VALUES (gen_random_uuid(), 'run.failed')",
    ],
    "worker": [
        "SELECT count(*) FROM dead_letters",
        "SELECT count(*) FROM api_keys",
        "DELETE FROM jobs",
        "SELECT count(*) FROM ingestion_messages",
        "UPDATE devices SET active = false",
        # The relay reads, stamps and deletes events; only the database writes them.
        "INSERT INTO event_outbox (tenant_id, kind) VALUES (gen_random_uuid(), 'run.failed')",
        "UPDATE event_outbox SET kind = 'run.succeeded'",
    ],
    "auth": [
        "SELECT count(*) FROM api_keys",
        "SELECT count(*) FROM ingestion_messages",
        "UPDATE device_credentials SET revoked_at = now()",
        "UPDATE devices SET active = false",
    ],
    "maintenance": [
        "SELECT count(*) FROM api_keys",
        "SELECT count(*) FROM device_credentials",
        "UPDATE jobs SET state = 'queued'",
        "DELETE FROM sessions",
        "INSERT INTO devices (tenant_id, external_id) SELECT id, 'x' FROM tenants",
    ],
}


@pytest.mark.parametrize("role", sorted(REFUSED))
async def test_each_role_is_refused_what_it_is_not_for(pg_dsn: str, role: str) -> None:
    async with role_conn(pg_dsn, role) as conn:
        assert await conn.fetchval("SELECT current_user") == f"tideway_{role}"
        for statement in REFUSED[role]:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    await conn.execute(statement)


async def test_every_table_is_granted_to_some_process(pg_dsn: str) -> None:
    """A table no role may read is one a new migration forgot to grant (every table is read
    by some process; api_keys only by the API; alembic_version by all, for their start-up
    wait for the schema)."""
    conn = await postgres.connect(pg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
            " AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition"
            " AND NOT EXISTS (SELECT 1 FROM unnest($1::text[]) r"
            "   WHERE has_table_privilege(r, c.oid, 'SELECT'))",
            [f"tideway_{r}" for r in ROLES])
    finally:
        await conn.close()
    assert [r["relname"] for r in rows] == []


async def test_the_ingest_consumer_runs_as_its_role(fleet: Harness) -> None:
    """Envelopes of every outcome - completed, invalid, unknown device, unparseable - are
    recorded by a consumer whose connections are the ingest role's, with its partitions kept
    by the maintenance role's."""
    settings = role_settings(fleet.settings, "ingest", maintenance=True)
    await fleet.publish("d1", {"ts": 1_000, "seq": 1, "values": good_values()}, msg_id="a")
    await fleet.publish("d1", {"ts": 1_001, "seq": 2, "values": good_values(temp=999)},
                        msg_id="b")
    await fleet.publish("nobody", {"ts": 1_002, "seq": 3, "values": good_values()}, msg_id="c")
    await fleet.publish("d2", {"ts": 1_003, "seq": 4, "values": good_values()}, msg_id="d")
    await fleet.publish("d2", None, msg_id="e", raw=b"{not json")
    await fleet.consume(5, settings=settings, within=60)
    async with fleet.pool.acquire() as conn:
        statuses = dict(await conn.fetch(
            "SELECT status::text, count(*) FROM ingestion_messages GROUP BY 1"))
        dead = await conn.fetchval("SELECT count(*) FROM dead_letters")
        owners = {r["relowner"] for r in await conn.fetch(
            "SELECT pg_get_userbyid(c.relowner) AS relowner FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'ingestion_messages'::regclass")}
    assert statuses.get("completed") == 2, statuses
    assert statuses.get("failed_validation") == 1, statuses
    assert statuses.get("failed_terminal") == 2, statuses
    assert dead >= 1
    assert owners == {"tideway_maintenance"}  # today's partitions, made by its role


async def test_a_session_goes_through_intake_worker_and_api_each_as_its_role(
    settings: Settings, pg_pool: asyncpg.Pool
) -> None:
    """An upload through the API (api role) becomes a run recorded by intake (intake role)
    and computed by a worker (worker role); the API then reads it back and acts on it."""
    from streams.api.keys import create_api_key
    from tests.integration.sessions.test_api import api_client

    api = role_settings(settings, "api")
    intake = role_settings(settings, "intake")
    worker = role_settings(settings, "worker")
    async with pg_pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="roles")
    headers = {"Authorization": f"Bearer {key.secret}"}
    session = synthesize(laps=2, imu_hz=20, gnss_hz=5)
    data = formats.write("csv", {"gnss": session.gnss, "imu": session.imu})
    api_pool = await postgres.create_pool(api.postgres(), postgres.API_POOL)
    executors = SessionExecutors(worker, compute="thread", dag=DEFAULT_DAG)
    stop = asyncio.Event()
    try:
        async with running_intake(intake), api_client(api, api_pool) as client:
            task = asyncio.create_task(run_worker(worker, executors=executors, pool=None,
                                                  concurrency=2, stop=stop, dag=DEFAULT_DAG))
            try:
                resp = await client.post("/v1/sessions?filename=race.csv&device=car-7",
                                         data=data, headers=headers)
                receipt = await resp.json()
                assert resp.status == 202, receipt
                final = await wait_for_run(settings, run_id=receipt["run_id"], timeout_s=120)
                assert final.status in {"succeeded", "partial"}, final
                run, sess = receipt["run_id"], receipt["session_id"]
                # Every read the console makes and every action, as the API role: a missing
                # grant is a permission error, answered 500 - never a legitimate answer.
                reads = ["/v1/runs", f"/v1/runs/{run}", f"/v1/runs/{run}/dag", "/v1/devices",
                         "/v1/devices/car-7", "/v1/devices/car-7/activity",
                         "/v1/devices/car-7/series", "/v1/fleet", "/v1/fleet/live",
                         "/v1/sessions", f"/v1/sessions/{sess}", f"/v1/sessions/{sess}/track",
                         f"/v1/sessions/{sess}/laps", "/v1/schemas", "/v1/dead-letters",
                         "/v1/dead-letter-groups", "/v1/devices/car-7/credentials",
                         "/v1/messages/1"]
                actions = ["/v1/devices/car-7/credentials", "/v1/devices/car-7/credentials/rotate",
                           "/v1/devices/car-7/credentials/revoke", "/v1/devices/car-7/deactivate",
                           "/v1/devices/car-7/activate", f"/v1/runs/{run}/cancel",
                           f"/v1/runs/{run}/retry"]
                answers = {}
                for path in reads:
                    answers[f"GET {path}"] = await client.get(path, headers=headers)
                for path in actions:
                    answers[f"POST {path}"] = await client.post(path, headers=headers)
                reprocess = await client.post(f"/v1/sessions/{sess}/reprocess", json={},
                                              headers=headers)
                answers["POST reprocess"] = reprocess
                failed = {k: (a.status, await a.text()) for k, a in answers.items()
                          if a.status >= 500}
                assert not failed, failed
                ok = [k for k, a in answers.items() if a.status < 300]
                assert len(ok) >= len(answers) - 3, {k: a.status for k, a in answers.items()}
                # Every change's event - the intake's, the worker's, the API's - was relayed
                # to NATS by the worker's relay, as the worker role.
                unrelayed = "SELECT count(*) FROM event_outbox WHERE relayed_at IS NULL"
                for _ in range(200):
                    if await pg_pool.fetchval(unrelayed) == 0:
                        break
                    await asyncio.sleep(0.05)
                assert await pg_pool.fetchval(unrelayed) == 0
                assert await pg_pool.fetchval("SELECT count(*) FROM event_outbox") >= 6
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    finally:
        await executors.aclose()
        await api_pool.close()


async def test_the_auth_service_checks_credentials_as_its_role(
    pg_dsn: str, pg_pool: asyncpg.Pool
) -> None:
    from tests.integration.ingest.conftest import seed_fleet

    async with pg_pool.acquire() as conn:
        await seed_fleet(conn, TENANT, active=["d1"])
        issued = await credentials.issue(conn, TENANT, "d1")
    async with role_conn(pg_dsn, "auth") as conn:
        verdict = await credentials.verify(conn, issued.username, issued.secret)
        assert verdict.ok and verdict.device == "d1"
        assert await credentials.valid_devices(conn, [issued.username]) == {issued.username}


async def test_retention_runs_as_the_maintenance_role(settings: Settings) -> None:
    """A maintenance round - partitions ahead, dedupe generations, expired partitions - as
    the maintenance role."""
    maintenance = role_settings(settings, "maintenance")
    pool = await postgres.create_pool(maintenance.postgres(), postgres.streaming_pool(2))
    try:
        done = await maintain_once(pool, maintenance, dry_run=False)
        assert done.created, done
        again = await maintain_once(pool, maintenance, dry_run=False)
        assert not again.created  # idempotent
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT current_user") == "tideway_maintenance"
    finally:
        await pool.close()


async def test_row_level_security_shows_the_api_only_its_request_tenant(
    pg_dsn: str, pg_pool: asyncpg.Pool
) -> None:
    """The second wall: a query that forgot its tenant filter, run by the API role through
    the request's tenant-bound pool, sees only that tenant's rows; writing another tenant's
    row is refused; with no tenant set, nothing is seen at all."""
    from streams.api.tenant_db import TenantPool
    from tests.integration.ingest.conftest import seed_fleet

    async with pg_pool.acquire() as conn:
        await seed_fleet(conn, "acme", active=["a1", "a2"])
        await seed_fleet(conn, "globex", active=["g1"])
        tenants = dict(await conn.fetch("SELECT name, id FROM tenants"))
        await credentials.issue(conn, "acme", "a1")
        await credentials.issue(conn, "globex", "g1")
    api = await postgres.create_pool(as_role(pg_dsn, "api"), postgres.API_POOL)
    try:
        acme = TenantPool(api, tenants["acme"], "acme")
        async with acme.acquire() as conn:
            devices = {r["external_id"] for r in await conn.fetch(
                "SELECT external_id FROM devices")}  # no WHERE: the policy's rows only
            issued = await conn.fetchval("SELECT count(*) FROM device_credentials")
            async with conn.transaction():  # a handler's own transaction carries the tenant
                schemas = await conn.fetchval("SELECT count(*) FROM device_schemas")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("INSERT INTO devices (tenant_id, external_id)"
                                   " VALUES ($1, 'planted')", tenants["globex"])
        assert devices == {"a1", "a2"}
        assert issued == 1
        assert schemas == 1
        async with api.acquire() as bare:  # the pool itself: no tenant, no rows
            assert await bare.fetchval("SELECT count(*) FROM devices") == 0
            assert await bare.fetchval("SELECT count(*) FROM device_credentials") == 0
    finally:
        await api.close()
    async with pg_pool.acquire() as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM devices WHERE external_id = 'planted'") == 0
