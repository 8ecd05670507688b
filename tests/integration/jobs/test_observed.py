"""The worker reports each job attempt to its process's observability: metrics and logs.

Every attempt logs its start and its end with run_id, job_id, job_type, attempt and worker_id
(spec 000 §14), and the job observer sees claim, completion, retry, reap and the run finishing.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import orjson
import pytest

from stages.jobs.dag import DEFAULT_DAG, JobSpec
from streams.config import Settings
from streams.errors import TransientError
from streams.jobs import queue
from streams.jobs.executor import JobContext, placeholder_executors
from streams.jobs.model import JobResult
from streams.jobs.worker import run_worker
from streams.observability.process import ProcessObservability
from tests.integration.jobs.conftest import Owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_run
from tests.integration.json_logs import captured_json_logs
from tests.integration.observability.conftest import fast

WORKER = "observed-worker"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    with captured_json_logs("INFO") as out:
        yield out


@pytest.fixture
async def observability() -> AsyncIterator[ProcessObservability]:
    async with ProcessObservability(fast(), components=("worker",)) as obs:
        yield obs


async def _run_worker(
    settings: Settings, executors: Any, obs: ProcessObservability
) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(
        settings, executors=executors, pool=None, concurrency=4, stop=stop, worker_id=WORKER,
        hooks=obs,
        dag=DEFAULT_DAG,
    ))
    return stop, task


def _value(obs: ProcessObservability, name: str, **labels: str) -> float:
    return obs.metrics.registry.get_sample_value(name, labels) or 0.0


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


async def test_every_attempt_is_logged_and_measured_and_the_run_finishing_too(
    settings: Settings, conn: asyncpg.Connection, owner: Owner,
    observability: ProcessObservability, json_log: io.StringIO,
) -> None:
    # An idempotency key marks the run as made for an upload (intake sets one).
    run_id = await start_run(conn, owner, channel=queue.jobs_channel(settings), key="upload-1")
    stop, task = await _run_worker(fast_settings(settings), placeholder_executors(DEFAULT_DAG),
                                   observability)
    try:
        assert await wait_run(conn, run_id) == "succeeded"
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)

    jobs = await conn.fetch("SELECT id, job_type, state FROM jobs WHERE run_id = $1", run_id)
    ran = [j for j in jobs if j["state"] == "succeeded"]
    assert ran
    for job_type in {j["job_type"] for j in ran}:
        count = sum(1 for j in ran if j["job_type"] == job_type)
        assert _value(observability, "tideway_job_claims_total", job_type=job_type) == count
        assert _value(observability, "tideway_job_duration_seconds_count",
                      job_type=job_type, outcome="succeeded") == count
        assert _value(observability, "tideway_job_attempts_total", job_type=job_type,
                      outcome="succeeded", error_code="") == count
        assert _value(observability, "tideway_worker_running_jobs", job_type=job_type) == 0
    assert _value(observability, "tideway_runs_finished_total", status="succeeded") == 1
    assert _value(observability, "tideway_session_upload_to_publish_seconds_count") == 1

    lines = _lines(json_log)
    for job in ran:
        mine = [line for line in lines if line.get("job_id") == str(job["id"])]
        messages = [line["message"] for line in mine]
        assert "job attempt started" in messages, messages
        assert "job attempt finished: succeeded" in messages, messages
        for line in mine:
            assert (line["run_id"], line["job_type"], line["attempt"], line["worker_id"]) == (
                str(run_id), job["job_type"], 1, WORKER)
    assert any(line["message"] == f"run {run_id} finished: succeeded" for line in lines)


async def test_a_retry_and_a_reaped_stale_lock_are_counted_by_job_type(
    settings: Settings, conn: asyncpg.Connection, owner: Owner,
    observability: ProcessObservability, json_log: io.StringIO,
) -> None:
    async def flaky(ctx: JobContext) -> JobResult:
        if ctx.job.attempt == 1:
            raise TransientError("object store hiccup", code="STORAGE_UNAVAILABLE")
        return JobResult()

    channel = queue.jobs_channel(settings)
    flaky_run = await start_run(conn, owner, dag={"flaky": JobSpec(name="flaky")},
                                channel=channel)
    stuck_run = await start_run(conn, owner, dag={"stuck": JobSpec(name="stuck")},
                                channel=channel)
    # A worker that claims the "stuck" job and dies: it never heartbeats again.
    (ghost,) = await queue.claim(conn, worker_id="ghost", limit=1, tenant_max_running=64,
                                 heavy_max_running=8, job_types=["stuck"])
    await conn.execute("UPDATE jobs SET heartbeat_at = now() - interval '1 hour' "
                       "WHERE id = $1", ghost.id)
    executors = {"flaky": flaky, "stuck": placeholder_executors(DEFAULT_DAG)["parse_raw"]}
    stop, task = await _run_worker(fast_settings(settings, stale_after_s=0.5), executors,
                                   observability)
    try:
        assert await wait_run(conn, flaky_run) == "succeeded"
        assert await wait_run(conn, stuck_run) == "succeeded"
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)

    assert _value(observability, "tideway_job_retries_scheduled_total", job_type="flaky") == 1
    assert _value(observability, "tideway_job_attempts_total", job_type="flaky",
                  outcome="retry_scheduled", error_code="STORAGE_UNAVAILABLE") == 1
    assert _value(observability, "tideway_job_stale_locks_reaped_total", job_type="stuck") == 1
    assert _value(observability, "tideway_runs_finished_total", status="succeeded") == 2
    # Neither run came from an upload (no idempotency key): no upload-to-publish figure.
    assert _value(observability, "tideway_session_upload_to_publish_seconds_count") == 0

    lines = _lines(json_log)
    retried = [line for line in lines
               if line["message"] == "job attempt finished: retry_scheduled"]
    assert [(r["job_type"], r["attempt"], r["error_code"]) for r in retried] == [
        ("flaky", 1, "STORAGE_UNAVAILABLE")]
    reaped = [line for line in lines if line["message"].startswith("reaped job")]
    assert [(r["job_id"], r["run_id"]) for r in reaped] == [(str(ghost.id), str(stuck_run))]
    assert uuid.UUID(reaped[0]["job_id"]) == ghost.id
