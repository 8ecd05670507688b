"""Reprocess and rollback: the active pointer is blue/green; old runs and datasets stay."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from streams.config import Settings
from streams.errors import NotFoundError, UsageError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.sessions.progress import wait_for_run
from streams.sessions.reprocess import reprocess, rollback
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_system


async def _active(pool: Any, session_id: uuid.UUID) -> uuid.UUID:
    async with pool.acquire() as conn:
        found: uuid.UUID = await conn.fetchval(
            "SELECT active_run_id FROM sessions WHERE id = $1", session_id
        )
    return found


async def _datasets(pool: Any, run_id: uuid.UUID) -> dict[str, Any]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT name, storage_url, content_hash FROM derived_datasets WHERE run_id = $1", run_id
        )
    return {r["name"]: r for r in rows}


async def test_reprocess_moves_the_pointer_only_on_success_and_rollback_moves_it_back(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    async with running_system(settings):
        receipt = await upload_files(settings, tenant="acme", device="d1", paths=[nmea_file])
        first = await wait_for_run(
            settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=60
        )
    assert first.status in {"succeeded", "partial"}, first
    session = receipt.session_id
    assert await _active(pool, session) == first.run_id

    # A reprocess waits in the queue (no worker now): readers still see the first run.
    async with pool.acquire() as conn:
        second = await reprocess(
            conn, tenant="acme", session_id=session, namespace=settings.namespace
        )
    assert second.created and second.run_id != first.run_id
    assert await _active(pool, session) == first.run_id

    async with running_system(settings):
        done = await wait_for_run(settings, run_id=second.run_id, timeout_s=60)
        assert done.status in {"succeeded", "partial"}, done
        assert await _active(pool, session) == second.run_id
        # A reprocess whose required job fails (bad config) never takes the pointer.
        async with pool.acquire() as conn:
            third = await reprocess(
                conn,
                tenant="acme",
                session_id=session,
                config={"downsample": {"L1_bucket_s": -1}},
                namespace=settings.namespace,
            )
        failed = await wait_for_run(settings, run_id=third.run_id, timeout_s=60)
    assert failed.status == "failed", failed
    # The first stage reading the config refuses it (the run config model is checked whole).
    assert failed.jobs["artifact_validate"] == "failed"
    assert await _active(pool, session) == second.run_id

    async with pool.acquire() as conn:
        back = await rollback(conn, tenant="acme", session_id=session)
        history = await conn.fetchval(
            "SELECT metadata -> 'pointer_history' FROM sessions WHERE id = $1", session
        )
    assert (back.from_run, back.to_run) == (second.run_id, first.run_id)
    assert await _active(pool, session) == first.run_id
    assert [h["action"] for h in history] == ["reprocess", "reprocess", "rollback"]

    # Both runs' datasets are still there, distinct and intact.
    old, new = await _datasets(pool, first.run_id), await _datasets(pool, second.run_id)
    assert set(old) == set(new) and "gnss_L1" in old
    assert old["gnss_L1"]["storage_url"] != new["gnss_L1"]["storage_url"]
    store = ObjectStore(settings.objects())
    for row in (old["gnss_L1"], new["gnss_L1"]):
        assert read_table(store, row["storage_url"], sha256=row["content_hash"]).num_rows > 0

    async with pool.acquire() as conn:
        with pytest.raises(UsageError):  # nothing earlier than the first run
            await rollback(conn, tenant="acme", session_id=session)
        with pytest.raises(UsageError):  # the failed run can never be made active
            await rollback(conn, tenant="acme", session_id=session, to_run=third.run_id)
        with pytest.raises(NotFoundError):  # another tenant does not see the session
            await reprocess(conn, tenant="globex", session_id=session)
