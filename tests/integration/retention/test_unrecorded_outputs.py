"""Retention sweeps output directories that no dataset row records (issue 27 defect 8's
backstop): a cancelled job's folder, promoted by an attempt whose worker never removed it,
goes once ``leftovers_s`` has passed; the run's recorded outputs stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from streams.config import Settings
from streams.jobs import queue
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore
from streams.retention import maintain, unrecorded_outputs
from streams.retention.plan import PlanItem
from streams.sessions.datasets import write_outputs
from tests.integration.jobs.conftest import make_owner, start_run
from tests.integration.sessions import conftest as sessions

pool = sessions.pool  # the session tests' asyncpg pool, used here by name


def _mine(items: list[PlanItem]) -> list[tuple[str, str]]:
    return [(i.target, i.action) for i in items if i.tier == unrecorded_outputs.TIER]


def _promote(store: ObjectStore, prefix: str) -> list[DatasetRecord]:
    outputs = write_outputs(store, prefix, tables={"n": pa.table({"n": [1, 2]})}, summary={},
                            header={})  # fmt: skip
    return [DatasetRecord(name=f"{prefix.rsplit('/', 1)[1]}.n", storage_url=f.url,
                          content_hash=f.sha256, schema_version=f.schema_version,
                          row_count=f.rows) for f in outputs.datasets]  # fmt: skip


async def test_a_cancelled_jobs_unrecorded_outputs_are_swept_and_recorded_ones_kept(
    settings: Settings, pool: Any
) -> None:
    store = ObjectStore(settings.objects())
    channel = queue.jobs_channel(settings)
    dag = {
        "kept": JobSpec(name="kept", job_type="noop"),
        "cut": JobSpec(name="cut", job_type="noop"),
        "never": JobSpec(name="never", job_type="other"),
    }
    async with pool.acquire() as conn:
        owner = await make_owner(conn)
        run_id = await start_run(conn, owner, dag=dag, channel=channel)
        jobs = {j.name: j for j in await queue.claim(
            conn, worker_id="w", limit=8, tenant_max_running=8, heavy_max_running=8,
            job_types=["noop"],
        )}  # fmt: skip
        assert set(jobs) == {"kept", "cut"}
        kept = _promote(store, f"datasets/{run_id}/kept-{'a' * 20}")
        # The attempt promoted, then its worker died before the cancel's refusal: nobody
        # removed the folder.
        _promote(store, f"datasets/{run_id}/cut-{'b' * 20}")
        # A folder of a job that never started is none of this tier's business.
        _promote(store, f"datasets/{run_id}/never-{'c' * 20}")
        assert await queue.complete(conn, jobs["kept"], JobResult(datasets=kept),
                                    channel=channel, dag=DEFAULT_DAG) == "applied"  # fmt: skip
        await queue.cancel_run(conn, run_id, dag=DEFAULT_DAG)
        await queue.acknowledge_cancel(conn, jobs["cut"], channel=channel, dag=DEFAULT_DAG)
        assert await conn.fetchval(
            "SELECT status FROM processing_runs WHERE id = $1 AND completed_at IS NOT NULL",
            run_id,
        ) == "cancelled"  # fmt: skip
    cut = f"datasets/{run_id}/cut-{'b' * 20}"
    now = datetime.now(UTC)

    async with pool.acquire() as conn:
        assert _mine(await maintain.current_plan(conn, settings, now)) == [(cut, "keep")]
    later = now + timedelta(seconds=settings.retention.leftovers_s + 60)
    dry = await maintain.maintain_once(pool, settings, now=later, dry_run=True)
    assert dry is not None and _mine(dry.done) == [(cut, "drop")]
    assert store.list(cut)

    ran = await maintain.maintain_once(pool, settings, now=later)
    assert ran is not None and _mine(ran.done) == [(cut, "drop")]
    left = sorted(p.name for p in (Path(settings.objects()) / "datasets" / str(run_id)).iterdir())
    assert left == [f"kept-{'a' * 20}", f"never-{'c' * 20}"]
    async with pool.acquire() as conn:
        assert _mine(await maintain.current_plan(conn, settings, later)) == []
