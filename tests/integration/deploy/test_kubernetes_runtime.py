"""What deploy/kubernetes asks of the running system, tried against real servers.

* The worker ScaledObject's query (KEDA's postgresql scaler) on a migrated database: one row,
  one integer — the jobs a worker can claim now plus the ones running — read from the partial
  indexes only.
* The ingest ScaledObject's source: KEDA's nats-jetstream scaler reads nats-server's
  ``/jsz?acc=<account>&consumers=true&config=true`` and takes the consumer's
  ``num_pending + num_ack_pending``. A private nats-server with its monitoring port, provisioned
  as ``tideway streams init`` does, must list the stream and consumer the manifest names.
* The Deployments' ``wait-for-schema`` init container: it returns at once on a database at the
  migration head and keeps waiting on one that is not.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import nats
import pytest
import yaml

from streams.config import Settings
from streams.embedded import free_port, nats_server_binary
from streams.identity.broker import ADMIN, BrokerKeys, ensure_keys, server_config
from streams.ingest.provision import provision_nats
from streams.names import Names
from tests.shared_data import REPO_ROOT

BASE = REPO_ROOT / "deploy" / "kubernetes" / "base"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def _trigger(file: str) -> dict[str, Any]:
    (scaled,) = [d for d in _docs(file) if d["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    return dict(trigger)


async def _job(conn: asyncpg.Connection, tenant: uuid.UUID, run: uuid.UUID, state: str,
               next_run_at: datetime | None = None) -> None:
    locked = state in ("running", "cancel_requested")
    await conn.execute(
        "INSERT INTO jobs (run_id, tenant_id, name, job_type, state, pool, critical,"
        " max_attempts, soft_timeout_s, hard_timeout_s, next_run_at, locked_by, locked_at,"
        " skip_reason)"
        " VALUES ($1, $2, $3, 'parse', $4, 'cpu', true, 3, 60, 120, $5, $6, $7, $8)",
        run, tenant, f"parse-{uuid.uuid4().hex[:8]}", state, next_run_at,
        "w-1" if locked else None, datetime.now(UTC) if locked else None,
        "test" if state == "skipped" else None,
    )


async def test_worker_scaler_query_counts_claimable_and_running_jobs(
    pg_pool: asyncpg.Pool,
) -> None:
    trigger = _trigger("worker.yaml")
    assert trigger["type"] == "postgresql"
    query = trigger["metadata"]["query"]
    now = datetime.now(UTC)
    async with pg_pool.acquire() as conn:
        tenant = await conn.fetchval("INSERT INTO tenants (name) VALUES ('acme') RETURNING id")
        device = await conn.fetchval(
            "INSERT INTO devices (tenant_id, external_id) VALUES ($1, 'car-7') RETURNING id",
            tenant)
        session = await conn.fetchval(
            "INSERT INTO sessions (tenant_id, device_id) VALUES ($1, $2) RETURNING id",
            tenant, device)
        run = await conn.fetchval(
            "INSERT INTO processing_runs (tenant_id, session_id, artifact_set_hash,"
            " parser_version, pipeline_version) VALUES ($1, $2, 'h', 'p1', 'pl1') RETURNING id",
            tenant, session)
        assert await conn.fetchval(query) == 0  # an idle queue: KEDA may scale to the minimum
        for state in ("queued", "queued", "running", "cancel_requested",
                      "created", "succeeded", "failed", "skipped", "cancelled"):
            await _job(conn, tenant, run, state)
        await _job(conn, tenant, run, "retry_wait", now - timedelta(minutes=1))  # due
        await _job(conn, tenant, run, "retry_wait", now + timedelta(hours=1))  # not yet

        rows = await conn.fetch(query)
        # KEDA scans one value from the first row.
        assert len(rows) == 1 and len(rows[0]) == 1
        assert rows[0][0] == 2 + 1 + 2  # queued, due retry, running + cancel_requested

        # The jobs table keeps every finished job; the query must not read them.
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + query))
        await conn.execute("RESET enable_seqscan")
    assert "Seq Scan" not in plan, plan
    for index in ("ix_jobs_claim", "ix_jobs_retry", "ix_jobs_active"):
        assert index in plan, plan


@pytest.fixture
def monitored_nats(tmp_path: Path) -> Iterator[tuple[str, int, BrokerKeys]]:
    """A private nats-server (JetStream, monitoring port) configured as a deployment's is, with
    the accounts `tideway broker config` writes (so JetStream is in the account the trigger
    names), and the stream names the production ones, without a namespace prefix."""
    port, monitor = free_port(), free_port()
    keys = ensure_keys(tmp_path / "keys")
    (tmp_path / "auth.conf").write_text(server_config(keys, Names()))
    conf = tmp_path / "nats.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{monitor}"\n'
                    f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\ninclude auth.conf\n')
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"nats://127.0.0.1:{port}", monitor, keys
    finally:
        proc.terminate()
        proc.wait(10)


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return body


async def test_ingest_scaler_finds_the_stream_and_consumer(
    monitored_nats: tuple[str, int, BrokerKeys],
) -> None:
    url, monitor, keys = monitored_nats
    metadata = _trigger("ingest.yaml")["metadata"]
    nc = None
    for _ in range(100):  # the server is starting
        try:
            # As `tideway streams init` connects: the operator's user.
            nc = await nats.connect(url, allow_reconnect=False,
                                    nkeys_seed=str(keys.seed_file(ADMIN)))
            break
        except Exception:
            await asyncio.sleep(0.1)
    assert nc is not None
    try:
        js = nc.jetstream()
        settings = Settings(nats_url=url)
        await provision_nats(js, settings)  # what `tideway streams init` does on NATS
        names = Names()
        for i in range(7):
            await js.publish(names.telemetry_subject("acme", "ws-1", "state"), b"{}",
                             headers={"Nats-Msg-Id": f"m-{i}"})
    finally:
        await nc.close()

    # The request KEDA's scaler makes (scheme, endpoint, path and query as it builds them).
    jsz = await asyncio.to_thread(
        _get_json,
        f"http://127.0.0.1:{monitor}/jsz?acc={metadata['account']}&consumers=true&config=true",
    )
    (account,) = [a for a in jsz["account_details"] if a["name"] == metadata["account"]]
    (stream,) = [s for s in account["stream_detail"] if s["name"] == metadata["stream"]]
    (consumer,) = [c for c in stream["consumer_detail"] if c["name"] == metadata["consumer"]]
    assert consumer["num_pending"] + consumer["num_ack_pending"] == 7  # KEDA's lag


def _wait_for_schema() -> list[str]:
    (deployment,) = [d for d in _docs("ingest.yaml") if d["kind"] == "Deployment"]
    (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
    command: list[str] = init["command"]
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def _environment(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env["TIDEWAY_POSTGRES_DSN"] = dsn
    return env


def test_wait_for_schema_passes_a_migrated_database(pg_dsn: str, tmp_path: Path) -> None:
    done = subprocess.run(_wait_for_schema(), env=_environment(pg_dsn), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "waiting" not in done.stdout


def test_wait_for_schema_holds_an_unmigrated_database(empty_pg_dsn: str, tmp_path: Path) -> None:
    with subprocess.Popen(_wait_for_schema(), env=_environment(empty_pg_dsn), cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # blocks until the first report
            assert "waiting for tideway migrate: database at base, image needs" in line, line
            assert proc.poll() is None  # still waiting
        finally:
            proc.kill()
