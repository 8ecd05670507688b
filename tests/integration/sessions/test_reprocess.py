"""Reprocess and rollback: the active pointer is blue/green; old runs and datasets stay."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from streams.cli.exit_codes import ExitCode
from streams.config import Settings
from streams.errors import NotFoundError, UsageError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.sessions.progress import wait_for_run
from streams.sessions.reprocess import (
    BACKFILL_PRIORITY,
    BackfillScope,
    backfill,
    reprocess,
    rollback,
)
from streams.sessions.upload import upload_files
from streams.sessions.versions import current_versions
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

    store = ObjectStore(settings.objects())
    async with pool.acquire() as conn:
        back = await rollback(conn, tenant="acme", session_id=session, store=store)
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
    for row in (old["gnss_L1"], new["gnss_L1"]):
        assert read_table(store, row["storage_url"], sha256=row["content_hash"]).num_rows > 0

    async with pool.acquire() as conn:
        with pytest.raises(UsageError):  # nothing earlier than the first run
            await rollback(conn, tenant="acme", session_id=session, store=store)
        with pytest.raises(UsageError):  # the failed run can never be made active
            await rollback(
                conn, tenant="acme", session_id=session, to_run=third.run_id, store=store
            )
        with pytest.raises(NotFoundError):  # another tenant does not see the session
            await reprocess(conn, tenant="globex", session_id=session)


async def _runs_of(pool: Any, session_id: uuid.UUID) -> list[Any]:
    async with pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT id, requested_by, priority, parser_version FROM processing_runs "
                "WHERE session_id = $1 ORDER BY created_at",
                session_id,
            )
        )


async def test_backfill_starts_one_low_priority_run_per_stale_session_however_often_it_runs(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    async with running_system(settings):
        sessions = {}
        for tenant in ("acme", "globex"):
            receipt = await upload_files(settings, tenant=tenant, device="d1", paths=[nmea_file])
            done = await wait_for_run(
                settings, tenant=tenant, artifact_set_hash=receipt.artifact_set_hash, timeout_s=60
            )
            assert done.status in {"succeeded", "partial"}, done
            sessions[tenant] = receipt.session_id
    acme, globex = sessions["acme"], sessions["globex"]
    ns = settings.namespace

    # Runs made with the code of today are current: a backfill has nothing to do.
    async with pool.acquire() as conn:
        items = await backfill(conn, BackfillScope(), namespace=ns)
    assert sorted(i.action for i in items) == ["current", "current"]

    # The parser changed since (the runs pin an older version): both sessions are stale.
    async with pool.acquire() as conn:
        await conn.execute("UPDATE processing_runs SET parser_version = 'older'")
        dry = await backfill(conn, BackfillScope(tenant="acme"), dry_run=True, namespace=ns)
    assert [(i.session_id, i.action, i.device) for i in dry] == [(acme, "would_start", "d1")]
    assert len(await _runs_of(pool, acme)) == 1  # a dry run starts nothing

    seen: list[tuple[str, int, int]] = []
    async with pool.acquire() as conn:
        first = await backfill(
            conn, BackfillScope(tenant="acme", device="d1"), namespace=ns,
            on_item=lambda item, done, total: seen.append((item.action, done, total)),
        )  # fmt: skip
        again = await backfill(conn, BackfillScope(tenant="acme"), namespace=ns)
    assert [i.action for i in first] == ["started"] and seen == [("started", 1, 1)]
    assert [(i.action, i.run_id) for i in again] == [("current", first[0].run_id)]
    runs = await _runs_of(pool, acme)
    assert len(runs) == 2  # one backfill run, however often it is asked for
    assert runs[1]["id"] == first[0].run_id
    assert runs[1]["requested_by"] == "backfill:operator"
    assert runs[1]["priority"] == BACKFILL_PRIORITY < 0  # below interactive uploads
    assert runs[1]["parser_version"] == current_versions().parser

    # Two backfills at once: the session's lock lets exactly one of them start a run.
    async with pool.acquire() as c1, pool.acquire() as c2:
        both = await asyncio.gather(
            backfill(c1, BackfillScope(tenant="globex"), namespace=ns),
            backfill(c2, BackfillScope(tenant="globex"), namespace=ns),
        )
    assert sorted(i.action for items in both for i in items) == ["current", "started"]
    assert len(await _runs_of(pool, globex)) == 2

    # Outside the time range: nothing.
    async with pool.acquire() as conn:
        later = await backfill(
            conn, BackfillScope(since=datetime.now(UTC) + timedelta(days=1)), namespace=ns
        )
    assert later == []

    # The backfill runs are ordinary reprocesses: they end and take the pointer.
    async with running_system(settings):
        done = await wait_for_run(settings, run_id=first[0].run_id, timeout_s=60)
    assert done.status in {"succeeded", "partial"}
    async with pool.acquire() as conn:
        assert await _active(pool, acme) == first[0].run_id
        assert [i.action for i in await backfill(conn, BackfillScope(), namespace=ns)] == [
            "current",
            "current",
        ]


async def _pointer(pool: Any, session_id: uuid.UUID) -> dict[str, Any]:
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT active_run_id, status, updated_at, metadata FROM sessions WHERE id = $1",
            session_id,
        )
    return dict(row)


async def test_a_corrupted_or_missing_dataset_blocks_a_rollback(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    """Issue 27 (5): rollback re-verifies every dataset of the run it would make active (read
    back, sha256 against ``content_hash``) before the pointer moves; one byte changed on disk,
    or a file gone, refuses it - from the engine, the CLI and the API - and changes nothing."""
    from streams.api.keys import create_api_key
    from tests.integration.jobs.test_cli_runs import tideway
    from tests.integration.sessions.test_api import api_client

    async with running_system(settings):
        receipt = await upload_files(settings, tenant="acme", device="d1", paths=[nmea_file])
        first = await wait_for_run(
            settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=60
        )
        async with pool.acquire() as conn:
            second = await reprocess(
                conn, tenant="acme", session_id=receipt.session_id, namespace=settings.namespace
            )
        done = await wait_for_run(settings, run_id=second.run_id, timeout_s=60)
    assert {first.status, done.status} <= {"succeeded", "partial"}
    session = receipt.session_id
    store = ObjectStore(settings.objects())
    old = await _datasets(pool, first.run_id)
    corrupt = Path(urlsplit(old["gnss_L1"]["storage_url"]).path)
    missing = Path(urlsplit(old["parse_raw.gnss"]["storage_url"]).path)
    good_bytes = await asyncio.to_thread(corrupt.read_bytes)
    gone_bytes = await asyncio.to_thread(missing.read_bytes)
    damaged = bytearray(good_bytes)
    damaged[len(damaged) // 2] ^= 0x01  # one bit of one byte, the size unchanged
    await asyncio.to_thread(corrupt.write_bytes, bytes(damaged))
    await asyncio.to_thread(missing.unlink)
    before = await _pointer(pool, session)
    assert before["active_run_id"] == second.run_id

    async with pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="test")
        for to_run in (None, first.run_id):  # the previous good run, or named
            with pytest.raises(UsageError) as refused:
                await rollback(conn, tenant="acme", session_id=session, to_run=to_run,
                               store=store)  # fmt: skip
            assert refused.value.code == "ROLLBACK_VERIFICATION_FAILED"
            message = refused.value.message
            assert str(first.run_id) in message
            assert "gnss_L1: CHECKSUM_MISMATCH" in message
            assert "parse_raw.gnss: OBJECT_MISSING" in message
    code, out, err = await tideway(
        settings, "sessions", "rollback", str(session), "--tenant", "acme"
    )
    assert code == ExitCode.ERROR, (out, err)
    assert "ROLLBACK_VERIFICATION_FAILED" in err and "gnss_L1" in err
    async with api_client(settings, pool) as client:
        resp = await client.post(
            f"/v1/sessions/{session}/rollback", json={},
            headers={"Authorization": f"Bearer {key.secret}"},
        )  # fmt: skip
        problem = await resp.json()
    assert resp.status == 409 and problem["code"] == "ROLLBACK_VERIFICATION_FAILED", problem
    assert await _pointer(pool, session) == before  # nothing moved, nothing noted

    # Put right, the same rollback goes through.
    await asyncio.to_thread(corrupt.write_bytes, good_bytes)
    await asyncio.to_thread(missing.write_bytes, gone_bytes)
    async with pool.acquire() as conn:
        back = await rollback(conn, tenant="acme", session_id=session, store=store)
    assert (back.from_run, back.to_run) == (second.run_id, first.run_id)
    assert await _active(pool, session) == first.run_id
