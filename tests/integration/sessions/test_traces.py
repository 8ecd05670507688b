"""Session traces: an upload starts (or continues) a trace, intake continues it, the run stores
it, every job attempt is a span of it and ``job_attempts.trace_id`` names it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.jobs.executor import JobContext
from streams.jobs.model import JobResult
from streams.jobs.worker import run_worker
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_intake, wait_until
from tests.integration.sessions.test_api import _key, api_client
from tests.tracing import named, spans, trace_id

__all__ = ["spans"]  # the fixture

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _first_attempt(settings: Settings, pool: Any, run_id: Any) -> Any:
    """Run the run's first job once (a no-op executor); its ``job_attempts`` row."""
    async with pool.acquire() as conn:
        job_type = await conn.fetchval(
            "SELECT job_type FROM jobs WHERE run_id = $1 AND state = 'queued' LIMIT 1", run_id)

    async def succeed(ctx: JobContext) -> JobResult:
        return JobResult()

    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, executors={job_type: succeed}, pool=None,
                                            concurrency=1, stop=stop, dag=DEFAULT_DAG))

    async def attempt() -> Any:
        async with pool.acquire() as conn:
            return await conn.fetchrow(
                "SELECT a.* FROM job_attempts a JOIN jobs j ON j.id = a.job_id "
                "WHERE j.run_id = $1", run_id)

    try:
        return await wait_until(attempt, within=30)
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)


async def _run(pool: Any, artifact_set_hash: str) -> Any:
    async def run() -> Any:
        async with pool.acquire() as conn:
            return await conn.fetchrow(
                "SELECT id, traceparent FROM processing_runs WHERE artifact_set_hash = $1",
                artifact_set_hash)
    return await wait_until(run, within=20)


async def test_upload_run_and_job_attempt_are_one_trace(
    settings: Settings, pool: Any, nmea_file: Path, spans: InMemorySpanExporter
) -> None:
    async with running_intake(settings):
        receipt = await upload_files(settings, tenant="acme", device="car-7", paths=[nmea_file])
        run = await _run(pool, receipt.artifact_set_hash)
    attempt = await _first_attempt(settings, pool, run["id"])

    (upload,) = named(spans, "session.upload")
    (intake,) = named(spans, "session.intake")
    (job,) = named(spans, "job.attempt")
    assert upload.parent is None  # the CLI upload starts the trace
    assert upload.context is not None and intake.context is not None
    assert intake.parent is not None and intake.parent.span_id == upload.context.span_id
    assert job.parent is not None and job.parent.span_id == intake.context.span_id
    trace = trace_id(upload)
    assert trace_id(intake) == trace_id(job) == trace
    assert run["traceparent"].split("-")[1] == trace
    assert attempt["trace_id"] == trace
    assert job.attributes is not None
    assert job.attributes["tideway.run_id"] == str(run["id"])
    assert job.attributes["tideway.outcome"] == "succeeded"


async def test_an_upload_continues_the_callers_trace(
    settings: Settings, pool: Any, nmea_file: Path, spans: InMemorySpanExporter
) -> None:
    async with running_intake(settings):
        receipt = await upload_files(settings, tenant="acme", device="car-8", paths=[nmea_file],
                                     traceparent=CALLER)
        run = await _run(pool, receipt.artifact_set_hash)
    (upload,) = named(spans, "session.upload")
    assert upload.parent is not None and upload.parent.span_id == int(CALLER.split("-")[2], 16)
    assert trace_id(upload) == CALLER.split("-")[1] == run["traceparent"].split("-")[1]


async def test_without_tracing_a_callers_trace_is_still_recorded(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    # Tracing off: no span, but the run and its attempts still join the caller's trace.
    async with running_intake(settings):
        receipt = await upload_files(settings, tenant="acme", device="car-9", paths=[nmea_file],
                                     traceparent=CALLER)
        run = await _run(pool, receipt.artifact_set_hash)
    assert run["traceparent"] == CALLER
    attempt = await _first_attempt(settings, pool, run["id"])
    assert attempt["trace_id"] == CALLER.split("-")[1]


async def test_an_http_upload_continues_the_traceparent_header(
    settings: Settings, pool: Any, nmea_file: Path, spans: InMemorySpanExporter
) -> None:
    headers = {**await _key(pool, "acme"), "traceparent": CALLER}
    data = await asyncio.to_thread(nmea_file.read_bytes)
    async with running_intake(settings), api_client(settings, pool) as client:
        form = aiohttp.FormData()
        form.add_field("device", "kart-3")
        form.add_field("file", data, filename="lap.nmea", content_type="text/plain")
        resp = await client.post("/v1/sessions", data=form, headers=headers)
        assert resp.status == 202, await resp.text()
        run_id = (await resp.json())["run_id"]
    (upload,) = named(spans, "session.upload")
    (intake,) = named(spans, "session.intake")
    assert upload.parent is not None and upload.parent.span_id == int(CALLER.split("-")[2], 16)
    assert upload.context is not None
    assert intake.parent is not None and intake.parent.span_id == upload.context.span_id
    async with pool.acquire() as conn:
        stored = await conn.fetchval(
            "SELECT traceparent FROM processing_runs WHERE id = $1::uuid", run_id)
    assert stored.split("-")[1] == CALLER.split("-")[1] == trace_id(intake)
