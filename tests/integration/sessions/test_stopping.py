"""Cancellation reaches the computation (issue 15 item 3): a real fusion stops, not just its slot.

A long synthetic session (150 laps, GNSS and IMU at 100 Hz: about 6 s of fusion's CPU on this
kind of machine since its loops are compiled; 30 laps took 4 s before and take 0.8 s now) is
fused by the real ``fuse_gnss_imu`` executor in its process pool under a real worker. Once the
pool process is busy computing, the run is cancelled; the process doing the fusion must stop
(it is terminated and a fresh one takes its place), not compute on.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

from stages.batch import canonical
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from streams.adapters import postgres
from streams.config import Settings
from streams.jobs import queue, run_actions
from streams.jobs.executor import JobContext
from streams.jobs.model import DatasetRecord, JobResult
from streams.objects import ObjectStore
from streams.sessions.datasets import write_outputs
from streams.sessions.stage_executors import SessionExecutors, record_name
from tests.conftest import REPO_ROOT
from tests.integration.jobs.conftest import make_owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_for, wait_run, workers

LAPS = 150  # see the module docstring: fusion must still be computing seconds after the cancel


def _aligned_streams(store: ObjectStore, *, laps: int = LAPS) -> list[DatasetRecord]:
    """A long session's gnss and imu, stored as ``time_align`` would have left them."""
    session = synthesize(laps=laps, imu_hz=100, gnss_hz=100, seed=3)
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


def _fusion_dag(records: list[DatasetRecord]) -> tuple[dict[str, JobSpec], Any]:
    """A two-job DAG: ``time_align`` hands ``records`` over, fusion computes on them (as the
    session DAG's fusion job: its pool, retry and heaviness); and the first job's body."""
    fusion = DEFAULT_DAG["fuse_gnss_imu"]
    dag = {
        "time_align": JobSpec(name="time_align", job_type="given"),
        "fuse_gnss_imu": JobSpec(name="fuse_gnss_imu", deps=(Dep(on="time_align"),),
                                 pool=fusion.pool, heavy=True, retry=fusion.retry,
                                 critical=False),
    }  # fmt: skip

    async def given(ctx: JobContext) -> JobResult:
        return JobResult(datasets=records)

    return dag, given


async def _owner_of(conn: Any, upload: Any) -> Any:
    """A session owning one artifact: the stand-in ``upload``."""
    owner = await make_owner(conn)
    await conn.execute(
        "UPDATE artifacts SET storage_url = $2, sha256 = $3 WHERE id = $1",
        owner.artifact_id, upload.url, upload.sha256,
    )  # fmt: skip
    return owner


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
    dag, given = _fusion_dag(records)

    table = SessionExecutors(settings, compute="process", workers=1, dag=DEFAULT_DAG)
    await table.warm_up()
    [pid] = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
    conn = await postgres.connect(settings.postgres())
    try:
        owner = await _owner_of(conn, upload)
        run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
        executors = {"given": given, "fuse_gnss_imu": table["fuse_gnss_imu"]}
        async with workers(fast_settings(settings), executors):
            await wait_for(conn, "SELECT state = 'running' FROM jobs WHERE name = $1",
                           "fuse_gnss_imu", within_s=60)  # fmt: skip
            # The pool process is fusing: well past reading its inputs.
            busy_from = _cpu_s(pid)
            await _until(lambda: _cpu_s(pid) >= busy_from + 3.0, within_s=60)
            await queue.cancel_run(conn, run_id, dag=DEFAULT_DAG)
            # Fusion alone would compute for ~3 s more; stopped, its process is gone at once
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


@pytest.mark.slow
async def test_a_cancel_reaches_the_fusion_process_at_once_not_at_a_heartbeat(
    settings: Settings,
) -> None:
    """Issue 27 defect 8: the workers are woken by the cancel itself (a notification on the jobs
    channel), not left to learn it at their next heartbeat, here ten minutes away. The stopped
    fusion leaves nothing under the cancelled run."""
    store = ObjectStore(settings.objects())
    records = await asyncio.to_thread(partial(_aligned_streams, store))
    upload = store.put("artifacts/session.nmea", b"$GPGGA,stand-in\r\n")
    dag, given = _fusion_dag(records)

    table = SessionExecutors(settings, compute="process", workers=1, dag=DEFAULT_DAG)
    await table.warm_up()
    [pid] = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
    conn = await postgres.connect(settings.postgres())
    try:
        owner = await _owner_of(conn, upload)
        run_id = await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
        executors = {"given": given, "fuse_gnss_imu": table["fuse_gnss_imu"]}
        async with workers(fast_settings(settings, heartbeat_s=600.0), executors):
            await wait_for(conn, "SELECT state = 'running' FROM jobs WHERE name = $1",
                           "fuse_gnss_imu", within_s=60)  # fmt: skip
            busy_from = _cpu_s(pid)
            await _until(lambda: _cpu_s(pid) >= busy_from + 1.5, within_s=60)
            asked = time.monotonic()
            await run_actions.cancel_run(  # as the CLI and API do
                conn, run_id, channel=queue.jobs_channel(settings))
            # Fusion would compute for ~4 s more, and the next heartbeat is 10 minutes away.
            await _until(lambda: _gone(pid), within_s=5)
            print(f"fusion process gone {time.monotonic() - asked:.3f} s after the cancel")
            assert await wait_run(conn, run_id) == "cancelled"
        attempt = await conn.fetchrow(
            "SELECT a.status, a.error_source FROM job_attempts a "
            "JOIN jobs j ON j.id = a.job_id WHERE j.name = 'fuse_gnss_imu'"
        )
        assert tuple(attempt) == ("cancelled", "operator")
        assert not list(store.list(f"datasets/{run_id}"))
    finally:
        await conn.close()
        await table.aclose()


def _worker_env(settings: Settings, tmp: Path) -> dict[str, str]:
    """The environment of a ``tideway worker`` joining this test's services."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update({
        "TIDEWAY_CONFIG": str(tmp / "absent.toml"),
        "TIDEWAY_POSTGRES_DSN": settings.postgres(),
        "TIDEWAY_NATS_URL": settings.nats(),
        "TIDEWAY_NAMESPACE": settings.namespace,
        "TIDEWAY_OBJECT_STORE": settings.objects(),
        "TIDEWAY_CLICKHOUSE_DSN": f"chdb://{tmp / 'worker-chdb'}",
        "TIDEWAY_DATA_DIR": str(tmp / "worker-data"),
        "TIDEWAY_WORKER__CONCURRENCY": "1",
        "TIDEWAY_LOG_LEVEL": "WARNING",
    })  # fmt: skip
    return env


@pytest.mark.slow
async def test_a_killed_worker_takes_its_pool_processes_with_it(
    settings: Settings, tmp_path: Path
) -> None:
    """Issue 27 defect 7: ``kill -9`` of a ``tideway worker`` computing fusion must not leave
    its pool process fusing on as an orphan (it did for the rest of the stage, 6-13 s and more,
    next to the retry once the job was reaped)."""
    store = ObjectStore(settings.objects())
    records = await asyncio.to_thread(partial(_aligned_streams, store))
    upload = store.put("artifacts/session.nmea", b"$GPGGA,stand-in\r\n")
    dag, given = _fusion_dag(records)

    conn = await postgres.connect(settings.postgres())
    worker: asyncio.subprocess.Process | None = None
    try:
        owner = await _owner_of(conn, upload)
        await start_run(conn, owner, dag=dag, channel=queue.jobs_channel(settings))
        async with workers(fast_settings(settings), {"given": given}):
            await wait_for(conn, "SELECT state = 'queued' FROM jobs WHERE name = $1",
                           "fuse_gnss_imu", within_s=30)  # fmt: skip
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streams.cli.main", "worker", "--pool", "heavy",
            env=_worker_env(settings, tmp_path), cwd=REPO_ROOT,
        )  # fmt: skip
        await wait_for(conn, "SELECT state = 'running' FROM jobs WHERE name = $1",
                       "fuse_gnss_imu", within_s=60)  # fmt: skip
        pool = psutil.Process(worker.pid).children(recursive=True)
        assert pool, "the worker has no pool process"
        # The pool process is fusing, well past reading its inputs.
        busy = {p.pid: _cpu_s(p.pid) for p in pool}
        await _until(lambda: any(_cpu_s(pid) >= cpu + 1.5 for pid, cpu in busy.items()),
                     within_s=60)  # fmt: skip
        os.kill(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        assert await worker.wait() == -signal.SIGKILL
        # Fusion alone would compute for ~4 s more here. The bound leaves room for a loaded
        # machine: the pool processes are killed by the kernel as their parent dies.
        await _until(lambda: all(_gone(p.pid) for p in pool), within_s=2.0)
        print(f"pool processes gone {time.monotonic() - killed:.3f} s after kill -9")
    finally:
        if worker is not None and worker.returncode is None:
            worker.kill()
            await worker.wait()
        await conn.close()
