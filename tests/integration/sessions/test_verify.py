"""Blue/green health check: a run becomes active only if its datasets and ClickHouse rows verify.

Each candidate run is stopped just before ``publish_session`` (a worker without that executor
leaves the job queued), damaged the way the world damages things - an object's bytes changed on
the store, a table's rows deleted in ClickHouse - and then published by a full worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from schemas import error_codes as codes
from stages.jobs.dag import DEFAULT_DAG
from streams.cli.runs import render_run
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.jobs.executor import Executor
from streams.jobs.worker import run_worker
from streams.sessions.materialise import table_name
from streams.sessions.progress import wait_for_run
from streams.sessions.reprocess import reprocess
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from streams.views.runs import show_run
from tests.integration.sessions.conftest import running_intake, wait_until

_GOOD = {"succeeded", "partial"}


@contextlib.asynccontextmanager
async def worker(settings: Settings, executors: Mapping[str, Executor]) -> AsyncIterator[None]:
    """A worker running the job types ``executors`` has (the others stay queued)."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_worker(
            settings, executors=executors, pool=None, concurrency=2, stop=stop, dag=DEFAULT_DAG
        )
    )
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def _row(pool: Any, sql: str, *args: Any) -> Any:
    async with pool.acquire() as conn:
        return await conn.fetchrow(sql, *args)


async def _active(pool: Any, session_id: uuid.UUID) -> uuid.UUID:
    row = await _row(pool, "SELECT active_run_id FROM sessions WHERE id = $1", session_id)
    return uuid.UUID(str(row["active_run_id"]))


async def _stop_before_publish(
    settings: Settings, pool: Any, executors: SessionExecutors, session_id: uuid.UUID
) -> uuid.UUID:
    """Reprocess the session and run it up to (not including) publish_session."""
    async with pool.acquire() as conn:
        run = await reprocess(
            conn, tenant="acme", session_id=session_id, namespace=settings.namespace
        )
    upto = {k: v for k, v in executors.items() if k != "publish_session"}

    async def publish_queued() -> bool:
        row = await _row(
            pool,
            "SELECT state FROM jobs WHERE run_id = $1 AND name = 'publish_session'",
            run.run_id,
        )
        return row is not None and row["state"] == "queued"

    async with worker(settings, upto):
        await wait_until(publish_queued, within=90)
    return run.run_id


async def _dataset(pool: Any, run_id: uuid.UUID, name: str) -> Any:
    return await _row(
        pool,
        "SELECT storage_url, content_hash, row_count FROM derived_datasets "
        "WHERE run_id = $1 AND name = $2",
        run_id,
        name,
    )


async def _publish(
    settings: Settings, pool: Any, executors: SessionExecutors, run_id: uuid.UUID
) -> tuple[str, Any]:
    async with worker(settings, executors):
        done = await wait_for_run(settings, run_id=run_id, timeout_s=60)
    row = await _row(
        pool,
        "SELECT r.summary -> 'verification' AS verification, j.last_error_code "
        "FROM processing_runs r JOIN jobs j ON j.run_id = r.id AND j.name = 'publish_session' "
        "WHERE r.id = $1",
        run_id,
    )
    return done.status, row


def _text(renderable: Any) -> str:
    console = Console(width=300, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _flip_a_byte(path: Path) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_a_run_failing_verification_stays_inactive_and_a_healthy_one_becomes_active(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    try:
        async with running_intake(settings), worker(settings, executors):
            receipt = await upload_files(settings, tenant="acme", device="d1", paths=[nmea_file])
            first = await wait_for_run(
                settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=60
            )
        assert first.status in _GOOD, first
        assert first.summary["verification"]["ok"] is True
        assert first.summary["verification"]["tables"]  # rows were counted
        session = receipt.session_id
        assert await _active(pool, session) == first.run_id

        # 1. A Parquet-only dataset's object is changed on the store after it was recorded.
        corrupt = await _stop_before_publish(settings, pool, executors, session)
        ds = await _dataset(pool, corrupt, "gnss_L0")
        _flip_a_byte(Path(urlsplit(ds["storage_url"]).path))
        status, row = await _publish(settings, pool, executors, corrupt)
        assert status == "failed"
        assert row["last_error_code"] == codes.RUN_VERIFICATION_FAILED
        assert row["verification"]["ok"] is False
        assert [p.split(" ")[:2] for p in row["verification"]["problems"]] == [
            ["gnss_L0:", "CHECKSUM_MISMATCH:"]
        ], row["verification"]
        assert await _active(pool, session) == first.run_id  # the previous run stays active
        async with pool.acquire() as conn:
            shown = _text(render_run(await show_run(conn, corrupt)))
        assert "verification: FAILED" in shown and "gnss_L0: CHECKSUM" in shown, shown

        # 2. ClickHouse loses a table's rows for the run between materialise and publish.
        dropped = await _stop_before_publish(settings, pool, executors, session)
        ds = await _dataset(pool, dropped, "gnss_L1")
        assert ds["row_count"] > 0
        ch = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
        await ch.command(
            f"DELETE FROM {ch.database}.{table_name('gnss_L1')} WHERE run_id = {{run:UUID}}",
            {"run": str(dropped)},
        )
        status, row = await _publish(settings, pool, executors, dropped)
        assert status == "failed"
        assert row["last_error_code"] == codes.RUN_VERIFICATION_FAILED
        assert row["verification"]["problems"] == [
            f"gnss_L1: 0 rows in ClickHouse {table_name('gnss_L1')}, dataset has {ds['row_count']}"
        ]
        assert await _active(pool, session) == first.run_id

        # 3. A healthy run passes the check and takes the pointer.
        healthy = await _stop_before_publish(settings, pool, executors, session)
        status, row = await _publish(settings, pool, executors, healthy)
        assert status in _GOOD
        assert row["verification"]["ok"] is True and row["last_error_code"] is None
        assert await _active(pool, session) == healthy
    finally:
        await executors.aclose()
