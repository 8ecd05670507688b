"""Resume: retrying a failed run reuses the verified outputs of the jobs that succeeded."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.errors import PermanentError
from streams.jobs.enqueue import retry_run
from streams.jobs.executor import JobContext
from streams.jobs.model import JobResult
from streams.names import Names
from streams.objects import ObjectStore
from streams.sessions.progress import wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_intake
from tests.integration.sessions.test_verify import worker

_GOOD = {"succeeded", "partial"}


async def _broken(ctx: JobContext, /) -> JobResult:
    raise PermanentError(f"{ctx.job.name} broke (the test's fault)")


async def _jobs(pool: Any, run_id: uuid.UUID) -> dict[str, Any]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT j.name, j.state, j.attempt_count, "
            "       (SELECT a.metrics FROM job_attempts a WHERE a.job_id = j.id "
            "        ORDER BY a.attempt_number DESC LIMIT 1) AS metrics, "
            "       coalesce((SELECT jsonb_object_agg(d.name, d.storage_url) "
            "                 FROM derived_datasets d WHERE d.job_id = j.id), '{}') AS datasets "
            "FROM jobs j WHERE j.run_id = $1",
            run_id,
        )
    return {r["name"]: r for r in rows}


async def test_a_retried_run_reuses_what_succeeded_and_computes_only_the_rest(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    try:
        # The first run: downsample_L1 (required) fails, so the run fails.
        broken = {**executors, "downsample_L1": _broken}
        async with running_intake(settings), worker(settings, broken):
            receipt = await upload_files(settings, tenant="acme", device="d1", paths=[nmea_file])
            first = await wait_for_run(
                settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=60
            )
        assert first.status == "failed", first
        assert first.jobs["downsample_L1"] == "failed"
        before = await _jobs(pool, first.run_id)
        done_before = {n for n, j in before.items() if j["state"] == "succeeded"}
        assert {"artifact_validate", "parse_raw", "time_align", "downsample_L0"} <= done_before

        async with pool.acquire() as conn:
            retry = await retry_run(
                conn,
                first.run_id,
                channel=Names(namespace=settings.namespace).jobs_channel,
                dag=DEFAULT_DAG,
            )
        async with worker(settings, executors):
            second = await wait_for_run(settings, run_id=retry.run_id, timeout_s=60)
        assert second.status in _GOOD, second
        async with pool.acquire() as conn:
            active = await conn.fetchval(
                "SELECT active_run_id FROM sessions WHERE id = $1", receipt.session_id
            )
        assert active == retry.run_id

        # The first run is as it was: the same jobs, attempts and datasets.
        assert await _jobs(pool, first.run_id) == before
        after = await _jobs(pool, retry.run_id)
        store = ObjectStore(settings.objects())
        keys = store.list(f"datasets/{retry.run_id}")
        written = {k.split("/")[2].rsplit("-", 1)[0] for k in keys}  # job names
        for name in done_before:
            job = after[name]
            assert job["state"] == "succeeded" and job["attempt_count"] == 1, name
            # Reused, not recomputed: the very files of the first run, no stage timings, and
            # nothing written under the new run's directory for this job.
            assert job["datasets"] == before[name]["datasets"], name
            assert job["metrics"]["resumed_from_run"] == str(first.run_id), name
            assert "timings" not in job["metrics"], name
            assert name not in written, name
        # The job that failed (and what follows it) was computed, into the new run's directory.
        recomputed = after["downsample_L1"]
        assert recomputed["state"] == "succeeded"
        assert "resumed_from_run" not in recomputed["metrics"]
        assert all(f"/datasets/{retry.run_id}/" in url for url in recomputed["datasets"].values())
        assert "downsample_L1" in written
    finally:
        await executors.aclose()
