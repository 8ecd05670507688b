"""Retention of the batch half against real Postgres, the object store and chDB: a superseded
run's datasets and ClickHouse rows go after the grace and the active run's never; the tmp/
sweeper takes only dead leftovers; a dry run changes nothing."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stages.jobs.dag import DEFAULT_DAG
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.errors import PermanentError, UsageError
from streams.jobs.enqueue import retry_run
from streams.jobs.executor import JobContext
from streams.jobs.model import JobResult
from streams.names import Names
from streams.objects import ObjectStore, artifact_key, sha256_hex
from streams.registry import ensure_device, ensure_tenant
from streams.retention import batch, maintain
from streams.retention.plan import PlanItem
from streams.sessions.datasets import read_table
from streams.sessions.progress import wait_for_run
from streams.sessions.reprocess import reprocess, rollback
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from tests.integration.sessions import conftest as sessions
from tests.integration.sessions.conftest import running_intake, running_system
from tests.integration.sessions.test_verify import worker

# The session tests' fixtures, used here by name.
pool = sessions.pool
nmea_file = sessions.nmea_file

DAY = timedelta(days=1)


def _mine(items: list[PlanItem]) -> list[PlanItem]:
    return [i for i in items if i.tier in batch.TIERS]


async def _datasets(db: Any, run: uuid.UUID) -> list[Any]:
    async with db.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT name, storage_url, content_hash FROM derived_datasets WHERE run_id = $1",
                run,
            )
        )


async def _clickhouse_rows(settings: Settings, run: uuid.UUID) -> dict[str, int]:
    ch = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
    out = {}
    for (table,) in await ch.query_rows(batch.SESSION_TABLES, {"db": ch.database}):
        rows = await ch.query_rows(
            f"SELECT count() FROM {ch.database}.{table} WHERE run_id = {{r:UUID}}", {"r": str(run)}
        )
        out[table] = int(rows[0][0])
    return out


async def test_a_superseded_runs_outputs_go_after_the_grace_and_the_active_runs_never(
    settings: Settings,
    pool: Any,
    nmea_file: Path,
) -> None:
    async with running_system(settings):
        receipt = await upload_files(settings, tenant="acme", device="d1", paths=[nmea_file])
        first = await wait_for_run(
            settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=90
        )
        assert first.status in {"succeeded", "partial"}, first
        async with pool.acquire() as conn:
            second = await reprocess(
                conn, tenant="acme", session_id=receipt.session_id, namespace=settings.namespace
            )
        done = await wait_for_run(settings, run_id=second.run_id, timeout_s=90)
        assert done.status in {"succeeded", "partial"}, done
    old, active = first.run_id, second.run_id
    store = ObjectStore(settings.objects())
    old_files, active_files = await _datasets(pool, old), await _datasets(pool, active)
    old_rows, active_rows = (
        await _clickhouse_rows(settings, old),
        await _clickhouse_rows(settings, active),
    )
    assert old_files and active_files
    assert sum(old_rows.values()) > 0 and sum(active_rows.values()) > 0
    grace = timedelta(seconds=settings.retention.superseded_runs_s)
    now = datetime.now(UTC)

    # Within the grace: listed, kept; the active run is not a retention subject at all.
    async with pool.acquire() as conn:
        items = _mine(await maintain.current_plan(conn, settings, now))
    runs = [i for i in items if i.tier == batch.SUPERSEDED_RUNS]
    assert [(i.target, i.action) for i in runs] == [(f"run {old}", "keep")]
    assert runs[0].expires_at is not None and runs[0].expires_at > now
    assert runs[0].bytes > 0

    # Past the grace, a dry run names it and changes nothing.
    later = now + grace + DAY
    dry = await maintain.maintain_once(pool, settings, now=later, dry_run=True)
    assert dry is not None
    assert [i.target for i in _mine(dry.done)] == [f"run {old}"]
    assert await _datasets(pool, old) == old_files
    assert await _clickhouse_rows(settings, old) == old_rows
    assert store.list(f"datasets/{old}")

    ran = await maintain.maintain_once(pool, settings, now=later)
    assert ran is not None and not ran.skipped
    assert [i.target for i in _mine(ran.done)] == [f"run {old}"]

    # The superseded run's files, ClickHouse rows and dataset rows are gone; the run stays.
    assert store.list(f"datasets/{old}") == []
    assert set((await _clickhouse_rows(settings, old)).values()) == {0}
    assert await _datasets(pool, old) == []
    async with pool.acquire() as conn:
        removed_at = await conn.fetchval(
            "SELECT outputs_removed_at FROM processing_runs WHERE id = $1", old
        )
        assert removed_at == later
        items = _mine(await maintain.current_plan(conn, settings, later))
    assert [i for i in items if i.tier == batch.SUPERSEDED_RUNS] == []

    # The active run is untouched: every dataset reads back against its hash, every row stays.
    assert await _datasets(pool, active) == active_files
    for f in active_files:
        read_table(store, f["storage_url"], sha256=f["content_hash"])
    assert await _clickhouse_rows(settings, active) == active_rows

    # And the removed run can never be made active again.
    async with pool.acquire() as conn:
        with pytest.raises(UsageError) as named:
            await rollback(
                conn, tenant="acme", session_id=receipt.session_id, to_run=old, store=store
            )
        assert named.value.code == "RUN_OUTPUTS_REMOVED"
        with pytest.raises(UsageError) as previous:
            await rollback(conn, tenant="acme", session_id=receipt.session_id, store=store)
        assert previous.value.code == "NO_PREVIOUS_RUN"


async def _running_job(db: Any, claimed_at: datetime) -> uuid.UUID:
    """A session whose one run has a job attempt running since ``claimed_at``."""
    async with db.acquire() as conn, conn.transaction():
        tenant = await ensure_tenant(conn, "acme")
        device = await ensure_device(conn, tenant, "d1")
        session = await conn.fetchval(
            "INSERT INTO sessions (tenant_id, device_id) VALUES ($1, $2) RETURNING id",
            tenant,
            device,
        )
        run: uuid.UUID = await conn.fetchval(
            "INSERT INTO processing_runs (tenant_id, session_id, artifact_set_hash, "
            "parser_version, pipeline_version, status, jobs_total, jobs_open) "
            "VALUES ($1, $2, 'h', 'p', 'p', 'running', 1, 1) RETURNING id",
            tenant,
            session,
        )
        await conn.execute(
            "INSERT INTO jobs (run_id, tenant_id, name, job_type, state, pool, critical, "
            "max_attempts, attempt_count, soft_timeout_s, hard_timeout_s, locked_by, locked_at) "
            "VALUES ($1, $2, 'parse_raw', 'parse_raw', 'running', 'default', true, 3, 1, 60, "
            "120, 'w1', $3)",
            run,
            tenant,
            claimed_at,
        )
    return run


async def _artifact(
    db: Any, store: ObjectStore, run: uuid.UUID | None, body: bytes, status: str
) -> str:
    """An artifact row with ``status`` (read by ``run`` if given) and its stored object."""
    digest = sha256_hex(body)
    stored = store.put(artifact_key("acme", digest), body)
    async with db.acquire() as conn, conn.transaction():
        tenant = await ensure_tenant(conn, "acme")
        art = await conn.fetchval(
            "INSERT INTO artifacts (tenant_id, sha256, bytes, filename, storage_url, status) "
            "VALUES ($1, $2, $3, 'f.log', $4, $5) RETURNING id",
            tenant,
            digest,
            len(body),
            stored.url,
            status,
        )
        if run is not None:
            await conn.execute(
                "INSERT INTO run_artifacts (run_id, artifact_id, position) VALUES ($1, $2, 0)",
                run,
                art,
            )
    return stored.key


def _all(store: ObjectStore) -> list[str]:
    return sorted(k for top in ("artifacts", "datasets", "tmp") for k in store.list(top))


def _age(store_root: str, key: str, when: datetime) -> None:
    """Set the modification time of ``key`` (and everything under it) to ``when``."""
    path = Path(store_root) / key
    stamp = when.timestamp()
    for p in [path, *path.rglob("*")]:
        os.utime(p, (stamp, stamp))


async def test_the_sweeper_takes_only_dead_leftovers_and_a_dry_run_nothing(
    settings: Settings,
    pool: Any,
) -> None:
    now = datetime.now(UTC)
    root = settings.objects()
    store = ObjectStore(root)
    leftover = timedelta(seconds=settings.retention.leftovers_s)
    claimed = now - 3 * leftover  # a live attempt, claimed long ago
    live_run = await _running_job(pool, claimed)

    store.write_temp("tmp/dead-file", b"x" * 10)  # an upload that died before its claim
    _age(root, "tmp/dead-file", claimed - DAY)
    store.write_temp("tmp/dead-dir/a.parquet", b"a")  # a dead attempt's outputs
    store.write_temp("tmp/dead-dir/b.parquet", b"b")
    _age(root, "tmp/dead-dir", claimed - 2 * DAY)
    store.write_temp("tmp/held/a.parquet", b"a")  # written after the live attempt's claim
    _age(root, "tmp/held", claimed + DAY)
    store.write_temp("tmp/fresh", b"f")  # younger than the leftovers age

    orphan = f"datasets/{uuid.uuid4()}"  # a run whose row is gone
    store.write_temp("tmp/o/x.parquet", b"o")
    store.promote_dir(
        "tmp/o", f"{orphan}/job-1", marker="x.parquet", hashes={"x.parquet": sha256_hex(b"o")}
    )
    _age(root, orphan, now - 2 * leftover)
    live_dir = f"datasets/{live_run}"  # a live run's outputs: its row exists
    store.write_temp("tmp/l/y.parquet", b"l")
    store.promote_dir(
        "tmp/l", f"{live_dir}/job-1", marker="y.parquet", hashes={"y.parquet": sha256_hex(b"l")}
    )
    _age(root, live_dir, now - 2 * leftover)

    deleted = await _artifact(pool, store, None, b"deleted", "deleted")
    in_use = await _artifact(pool, store, live_run, b"deleted, read by a live run", "deleted")
    kept = await _artifact(pool, store, None, b"validated", "validated")
    everything = _all(store)

    async with pool.acquire() as conn:
        plan = {i.target: i for i in _mine(await maintain.current_plan(conn, settings, now))}
    assert {t: i.action for t, i in plan.items()} == {
        "tmp/dead-file": "drop",
        "tmp/dead-dir": "drop",
        "tmp/held": "keep",
        "tmp/fresh": "keep",
        orphan: "drop",
        deleted: "drop",
        in_use: "keep",
    }
    assert plan["tmp/held"].expires_at is None  # not while the attempt that may hold it runs
    assert plan["tmp/dead-dir"].tier == batch.TMP_LEFTOVERS
    assert plan[orphan].tier == batch.ORPHAN_DATASETS
    assert plan[deleted].tier == batch.DELETED_ARTIFACTS

    dry = await maintain.maintain_once(pool, settings, now=now, dry_run=True)
    assert dry is not None
    assert {i.target for i in _mine(dry.done)} == {"tmp/dead-file", "tmp/dead-dir", orphan, deleted}
    assert _all(store) == everything

    ran = await maintain.maintain_once(pool, settings, now=now)
    assert ran is not None and not ran.skipped
    assert {i.target for i in _mine(ran.done)} == {"tmp/dead-file", "tmp/dead-dir", orphan, deleted}
    gone = {k for k in everything if k.startswith(("tmp/dead-", orphan, deleted))}
    assert len(gone) == 5  # two files in the dead directory
    assert _all(store) == sorted(set(everything) - gone)
    assert store.exists(kept) and store.exists(in_use) and store.list(live_dir)


async def _broken(ctx: JobContext, /) -> JobResult:
    raise PermanentError(f"{ctx.job.name} broke (the test's fault)")


async def _verify_all(db: Any, store: ObjectStore, run: uuid.UUID) -> list[str]:
    """Every dataset of ``run`` read back against its hash; returns their storage URLs."""
    files = await _datasets(db, run)
    assert files
    for f in files:
        read_table(store, f["storage_url"], sha256=f["content_hash"])
    return [f["storage_url"] for f in files]


async def test_retention_after_a_resumed_retry_keeps_every_file_the_active_run_needs(
    settings: Settings,
    pool: Any,
    nmea_file: Path,
) -> None:
    """Issue 27 (3): a retry reuses the outputs of the run it retries (its dataset rows point
    into that run's directory). Once the retry is active the retried run is superseded, and
    retention used to remove its whole directory a week later - the active run's datasets
    with it. Nothing any kept run points at may go; and while a retry waits, the run it
    will reuse is not removed either."""
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    store = ObjectStore(settings.objects())
    channel = Names(namespace=settings.namespace).jobs_channel
    later = datetime.now(UTC) + timedelta(seconds=settings.retention.superseded_runs_s) + DAY
    try:
        async with running_intake(settings), worker(settings, executors):
            receipt = await upload_files(settings, tenant="acme", device="d1", paths=[nmea_file])
            good = await wait_for_run(
                settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=60
            )
        assert good.status in {"succeeded", "partial"}, good
        # A reprocess whose required downsample_L1 fails, and a retry of it, waiting.
        async with pool.acquire() as conn:
            failing = await reprocess(
                conn, tenant="acme", session_id=receipt.session_id, namespace=settings.namespace
            )
        async with worker(settings, {**executors, "downsample_L1": _broken}):
            failed = await wait_for_run(settings, run_id=failing.run_id, timeout_s=60)
        assert failed.status == "failed", failed
        failed_files = store.list(f"datasets/{failed.run_id}")
        assert failed_files
        async with pool.acquire() as conn:
            retry = await retry_run(conn, failed.run_id, channel=channel, dag=DEFAULT_DAG)

        # Past every grace, while the retry waits: the good run (superseded by nothing but
        # still active) stays, the failed run stays for the retry to reuse.
        async with pool.acquire() as conn:
            plan = {i.target: i for i in _mine(await maintain.current_plan(conn, settings, later))}
        held = plan[f"run {failed.run_id}"]
        assert (held.action, held.expires_at) == ("keep", None)
        ran = await maintain.maintain_once(pool, settings, now=later)
        assert ran is not None and f"run {failed.run_id}" not in {i.target for i in ran.done}
        assert store.list(f"datasets/{failed.run_id}") == failed_files

        async with worker(settings, executors):
            resumed = await wait_for_run(settings, run_id=retry.run_id, timeout_s=60)
        assert resumed.status in {"succeeded", "partial"}, resumed
        needed = await _verify_all(pool, store, retry.run_id)
        borrowed = [u for u in needed if f"/datasets/{failed.run_id}/" in u]
        assert borrowed  # the retry's reused datasets are the failed run's very files

        # The retry is active; the good run and the failed one are superseded. Both go -
        # rows, ClickHouse rows - but every file the active run points at stays.
        ran = await maintain.maintain_once(pool, settings, now=later)
        assert ran is not None and not ran.skipped, ran
        assert {f"run {good.run_id}", f"run {failed.run_id}"} <= {i.target for i in ran.done}
        assert store.list(f"datasets/{good.run_id}") == []
        assert await _datasets(pool, failed.run_id) == []
        assert await _verify_all(pool, store, retry.run_id) == needed
        # ... and stays round after round, listed as kept while the retry points into it.
        ran = await maintain.maintain_once(pool, settings, now=later + DAY)
        assert ran is not None
        assert await _verify_all(pool, store, retry.run_id) == needed
        async with pool.acquire() as conn:
            plan = {i.target: i for i in _mine(await maintain.current_plan(conn, settings, later))}
        kept = plan[f"datasets/{failed.run_id}"]
        assert (kept.tier, kept.action, kept.expires_at) == (batch.ORPHAN_DATASETS, "keep", None)

        # A reprocess supersedes the retry; once the retry's outputs go, nothing points into
        # the failed run's directory any more and it goes too: nothing is left behind.
        async with pool.acquire() as conn:
            newest = await reprocess(
                conn, tenant="acme", session_id=receipt.session_id, namespace=settings.namespace
            )
        async with worker(settings, executors):
            done = await wait_for_run(settings, run_id=newest.run_id, timeout_s=60)
        assert done.status in {"succeeded", "partial"}, done
        for _ in range(2):  # the retry first, then the directory it pointed into
            ran = await maintain.maintain_once(pool, settings, now=later + DAY)
            assert ran is not None and not ran.skipped, ran
        assert await _datasets(pool, retry.run_id) == []
        assert {k.split("/")[1] for k in store.list("datasets")} == {str(newest.run_id)}
        await _verify_all(pool, store, newest.run_id)
    finally:
        await executors.aclose()
