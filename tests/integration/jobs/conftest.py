"""Helpers for the job engine tests: a tenant, device, session and artifact to hang runs on."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from stages.jobs.planner import RunPlan, plan_run
from streams.adapters import postgres
from streams.jobs.enqueue import enqueue_run
from streams.jobs.model import RunVersions
from streams.names import Names

VERSIONS = RunVersions(parser="p1", pipeline="pl1", fusion="f1")
CH = Names().jobs_channel  # tests without workers; worker tests pass their own channel


@dataclass(frozen=True, kw_only=True)
class Owner:
    tenant_id: uuid.UUID
    session_id: uuid.UUID
    artifact_id: uuid.UUID


async def make_owner(conn: asyncpg.Connection, tenant: str = "acme") -> Owner:
    tenant_id = await conn.fetchval(
        "INSERT INTO tenants (name) VALUES ($1) ON CONFLICT (name) DO UPDATE SET name = $1 "
        "RETURNING id",
        tenant,
    )
    device_id = await conn.fetchval(
        "INSERT INTO devices (tenant_id, external_id) VALUES ($1, $2) RETURNING id",
        tenant_id,
        f"dev-{uuid.uuid4().hex[:8]}",
    )
    session_id = await conn.fetchval(
        "INSERT INTO sessions (tenant_id, device_id) VALUES ($1, $2) RETURNING id",
        tenant_id,
        device_id,
    )
    sha = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    artifact_id = await conn.fetchval(
        "INSERT INTO artifacts (tenant_id, session_id, sha256, bytes, filename, storage_url) "
        "VALUES ($1, $2, $3, 10, 'a.nmea', 'file:///tmp/a.nmea') RETURNING id",
        tenant_id,
        session_id,
        sha,
    )
    return Owner(tenant_id=tenant_id, session_id=session_id, artifact_id=artifact_id)


async def start_run(
    conn: asyncpg.Connection,
    owner: Owner,
    *,
    plan: RunPlan | None = None,
    dag: Mapping[str, JobSpec] | None = None,
    config: Mapping[str, Any] | None = None,
    priority: int = 0,
    key: str | None = None,
    channel: str = CH,
) -> uuid.UUID:
    if plan is None:
        plan = plan_run(config, dag=dag) if dag is not None else plan_run(config)
    run = await enqueue_run(
        conn,
        tenant_id=owner.tenant_id,
        session_id=owner.session_id,
        plan=plan,
        config=config or {},
        versions=VERSIONS,
        artifact_ids=[owner.artifact_id],
        artifact_set_hash="h" * 64,
        priority=priority,
        idempotency_key=key,
        channel=channel,
        dag=DEFAULT_DAG,
    )
    return run.run_id


async def job_states(conn: asyncpg.Connection, run_id: uuid.UUID) -> dict[str, str]:
    rows = await conn.fetch("SELECT name, state FROM jobs WHERE run_id = $1", run_id)
    return {r["name"]: r["state"] for r in rows}


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await postgres.connect(pg_dsn)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def owner(conn: asyncpg.Connection) -> Owner:
    return await make_owner(conn)
