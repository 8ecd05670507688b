"""Cancellation reaches the computation (issue 15 item 3): a real fusion stops, not just its slot.

A long synthetic session (30 laps, GNSS at 100 Hz: about half a minute of fusion on this kind
of machine) is fused by the real ``fuse_gnss_imu`` executor in its process pool under a real
worker. Once the pool process is busy computing, the run is cancelled; the process doing the
fusion must stop (it is terminated and a fresh one takes its place), not compute on.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable

import psutil
import pytest

from stages.batch import canonical
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from streams.adapters import postgres
from streams.config import Settings
from streams.jobs import queue
from streams.jobs.executor import JobContext
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore
from streams.sessions.datasets import write_outputs
from streams.sessions.stage_executors import SessionExecutors, record_name
from tests.integration.jobs.conftest import make_owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_for, wait_run, workers


def _aligned_streams(store: ObjectStore) -> list[DatasetRecord]:
    """A long session's gnss and imu, stored as ``time_align`` would have left them."""
    session = synthesize(laps=30, imu_hz=100, gnss_hz=100, seed=3)
    tables = {s: canonical.conform(s, t) for s, t in (("gnss", session.gnss),
                                                      ("imu", session.imu))}  # fmt: skip
    outputs = write_outputs(store, "given/time_align", tables=tables, summary={},
                            header={"job": "time_align"})  # fmt: skip
    return [
        DatasetRecord(name=record_name("time_align", f.name), dataset_type=f.name,
                      storage_url=f.url, content_hash=f.sha256, schema_version=f.schema_version,
                      row_count=f.rows)
        for f in outputs.datasets
    ]  # fmt: skip


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _until(check: Callable[[], bool], *, within_s: float) -> None:
    async with asyncio.timeout(within_s):
        while True:
            if check():
                return
            await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_cancelling_a_run_stops_the_fusion_process(settings: Settings) -> None:
    store = ObjectStore(settings.objects())
    records = await asyncio.to_thread(_aligned_streams, store)
    upload = store.put("artifacts/session.nmea", b"$GPGGA,stand-in\r\n")  # read, not used by fusion
    fusion = DEFAULT_DAG["fuse_gnss_imu"]
    dag = {
        "time_align": JobSpec(name="time_align", job_type="given"),
        "fuse_gnss_imu": JobSpec(name="fuse_gnss_imu", deps=(Dep(on="time_align"),),
                                 pool=fusion.pool, heavy=True, retry=fusion.retry,
                                 critical=False),
    }  # fmt: skip

    async def given(ctx: JobContext) -> JobResult:
        return JobResult(datasets=records)

    table = SessionExecutors(settings, compute="process", workers=1)
    await table.warm_up()
    [pid] = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
    conn = await postgres.connect(settings.postgres())
    try:
        owner = await make_owner(conn)
        await conn.execute(
            "UPDATE artifacts SET storage_url = $2, sha256 = $3 WHERE id = $1",
            owner.artifact_id, upload.url, upload.sha256,
        )  # fmt: skip
        run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
        executors = {"given": given, "fuse_gnss_imu": table["fuse_gnss_imu"]}
        async with workers(fast_settings(settings), executors):
            await wait_for(conn, "SELECT state = 'running' FROM jobs WHERE name = $1",
                           "fuse_gnss_imu", within_s=60)  # fmt: skip
            # The pool process is fusing: well past reading its inputs.
            busy_from = _cpu_s(pid)
            await _until(lambda: _cpu_s(pid) >= busy_from + 3.0, within_s=60)
            await queue.cancel_run(conn, run_id)
            # Fusion alone would compute for ~25 s more; stopped, its process is gone at once
            # (the bound only leaves room for a heartbeat and a loaded machine).
            await _until(lambda: _gone(pid), within_s=10)
            assert await wait_run(conn, run_id) == "cancelled"
        attempt = await conn.fetchrow(
            "SELECT a.status, a.error_sub_type, a.error_source FROM job_attempts a "
            "JOIN jobs j ON j.id = a.job_id WHERE j.name = 'fuse_gnss_imu'"
        )
        assert tuple(attempt) == ("cancelled", "CANCELLED", "operator")
        # The pool is whole: it runs the next body in a fresh process.
        await table.warm_up()
        assert [p.pid for p in multiprocessing.active_children()] not in ([], [pid])
    finally:
        await conn.close()
        await table.aclose()
