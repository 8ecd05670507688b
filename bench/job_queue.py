"""Claim + complete throughput of the job engine, against procrastinate, on one Postgres.

For each worker count (default 1, 4 and 16) the script makes a fresh database, enqueues
``--jobs`` no-op jobs (runs of ``--jobs-per-run`` independent jobs, so run finalisation and the
session pointer are part of the cost), starts that many Tideway workers (``run_worker``, each
with its own connections, ``--concurrency`` slots, in this process) and times them until every
run is finalised. The same number of no-op tasks is then deferred to procrastinate and drained
by the same number of procrastinate workers with the same concurrency. Enqueueing is not timed.
Each row also gives the CPU per job of the workers' process (client) and of every Postgres
process (server), and how busy the whole machine was (`bench/cpu.py`).

    .venv/bin/python bench/job_queue.py                      # 20k jobs, workers 1/4/16, 128 slots
    .venv/bin/python bench/job_queue.py --jobs 5000 --workers 1,4 --no-procrastinate

Prints a table and writes ``bench/results/queue.json``. The Postgres server comes from
``TIDEWAY_BENCH_POSTGRES_DSN`` (default: the local server's Unix socket when it exists, else
``postgresql://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import cpu  # noqa: E402
from bench_pg import ADMIN_DSN, fresh_database  # noqa: E402

from stages.jobs.dag import DEFAULT_DAG, JobSpec  # noqa: E402
from stages.jobs.planner import plan_run  # noqa: E402
from streams import migrate  # noqa: E402
from streams.adapters import postgres  # noqa: E402
from streams.config import QuotaSettings, Settings, WorkerSettings, mask_url  # noqa: E402
from streams.jobs import queue  # noqa: E402
from streams.jobs.executor import noop  # noqa: E402
from streams.jobs.model import RunVersions  # noqa: E402
from streams.jobs.worker import run_worker  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "queue.json"


async def enqueue(dsn: str, jobs: int, per_run: int) -> int:
    conn = await postgres.connect(dsn)
    try:
        tenant = await conn.fetchval("INSERT INTO tenants (name) VALUES ('bench') RETURNING id")
        device = await conn.fetchval(
            "INSERT INTO devices (tenant_id, external_id) VALUES ($1, 'bench') RETURNING id",
            tenant,
        )
        dag = {f"n{i}": JobSpec(name=f"n{i}", job_type="noop") for i in range(per_run)}
        plan = plan_run(dag=dag)
        runs = jobs // per_run
        for _ in range(runs):
            session = await conn.fetchval(
                "INSERT INTO sessions (tenant_id, device_id) VALUES ($1, $2) RETURNING id",
                tenant,
                device,
            )
            await queue.enqueue_run(
                conn, tenant_id=tenant, session_id=session, plan=plan, config={},
                versions=RunVersions(parser="b", pipeline="b"), artifact_ids=[],
                artifact_set_hash="0" * 64, channel="bench_unused",
                dag=DEFAULT_DAG,
            )  # fmt: skip
        return runs * per_run
    finally:
        await conn.close()


async def tideway_round(workers: int, jobs: int, per_run: int, concurrency: int) -> dict[str, Any]:
    name, dsn = await fresh_database("tw")
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        total = await enqueue(dsn, jobs, per_run)
        settings = Settings(
            postgres_dsn=dsn,
            # The workers relay the runs' domain events to NATS, as in a deployment.
            nats_url=os.environ.get("TIDEWAY_BENCH_NATS_URL", "nats://127.0.0.1:4222"),
            namespace="bench",
            worker=WorkerSettings(
                concurrency=min(concurrency, 64), poll_interval_s=0.5, heartbeat_s=5.0,
                tenant_max_running=10_000, heavy_max_running=10,
            ),
            # One tenant owns every run here: its active-run limit (default 2) would measure
            # the policy, not the queue. The limit's check still runs in every claim.
            quotas=QuotaSettings(max_active_runs=1_000_000),
        )  # fmt: skip
        stop = asyncio.Event()
        watcher = await postgres.connect(dsn)
        parts, busy = cpu.by_component(), cpu.sample()
        started = time.perf_counter()
        tasks = [
            asyncio.create_task(
                run_worker(settings, dag=DEFAULT_DAG, executors={"noop": noop}, pool=None,
                           concurrency=concurrency, stop=stop, worker_id=f"bench-{i}")
            )
            for i in range(workers)
        ]  # fmt: skip
        await _drained(watcher)
        elapsed = time.perf_counter() - started
        spent = cpu.ms_per_1000(parts, cpu.by_component(), total)
        machine_busy = cpu.busy_percent(busy, cpu.sample())
        stop.set()
        await asyncio.gather(*tasks)
        done = await watcher.fetchval("SELECT count(*) FROM jobs WHERE state = 'succeeded'")
        attempts = await watcher.fetchval("SELECT count(*) FROM job_attempts")
        await watcher.close()
        assert done == total == attempts, (done, total, attempts)
        return {"system": "tideway", "workers": workers, "concurrency": concurrency,
                "jobs": total, "seconds": round(elapsed, 3),
                "jobs_per_s": round(total / elapsed, 1),
                # ms per 1,000 jobs is µs per job
                "client_cpu_us_per_job": round(spent.get("consumer", 0.0), 1),
                "postgres_cpu_us_per_job": round(spent.get("postgres", 0.0), 1),
                "nats_cpu_us_per_job": round(spent.get("nats", 0.0), 1),
                "machine_busy_percent": machine_busy}  # fmt: skip
    finally:
        await postgres.drop_database(ADMIN_DSN, name)


async def procrastinate_round(workers: int, jobs: int, concurrency: int) -> dict[str, Any]:
    import procrastinate

    name, dsn = await fresh_database("pc")
    try:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

        @app.task(name="noop")
        async def noop_task() -> None:
            return None

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for start in range(0, jobs, 1000):
                await noop_task.batch_defer_async(*({} for _ in range(min(1000, jobs - start))))
            parts, busy = cpu.by_component(), cpu.sample()
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    app.run_worker_async(
                        concurrency=concurrency, wait=False, install_signal_handlers=False,
                        delete_jobs="never", name=f"pc-{i}", fetch_job_polling_interval=0.05,
                    )
                    for i in range(workers)
                )
            )  # fmt: skip
            elapsed = time.perf_counter() - started
            spent = cpu.ms_per_1000(parts, cpu.by_component(), jobs)
            machine_busy = cpu.busy_percent(busy, cpu.sample())
            conn = await postgres.connect(dsn)
            try:
                done = await conn.fetchval(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                )
            finally:
                await conn.close()
        assert done == jobs, (done, jobs)
        return {"system": "procrastinate", "workers": workers, "concurrency": concurrency,
                "jobs": jobs, "seconds": round(elapsed, 3),
                "jobs_per_s": round(jobs / elapsed, 1),
                "client_cpu_us_per_job": round(spent.get("consumer", 0.0), 1),
                "postgres_cpu_us_per_job": round(spent.get("postgres", 0.0), 1),
                "nats_cpu_us_per_job": round(spent.get("nats", 0.0), 1),
                "machine_busy_percent": machine_busy}  # fmt: skip
    finally:
        await postgres.drop_database(ADMIN_DSN, name)


async def _drained(watcher: Any) -> None:
    """Return once every run is finalised (polls lightly: one count every 20 ms)."""
    pending = True
    while pending:
        pending = bool(await watcher.fetchval(
            "SELECT count(*) FROM processing_runs WHERE completed_at IS NULL"
        ))  # fmt: skip
        if pending:
            await asyncio.sleep(0.02)


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (f"{'system':<14}{'workers':>8}{'conc.':>7}{'jobs':>8}{'seconds':>10}"
              f"{'jobs/s':>10}{'client µs/job':>15}{'postgres µs/job':>17}"
              f"{'busy %':>8}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in rows:
        busy = r.get("machine_busy_percent")
        print(f"{r['system']:<14}{r['workers']:>8}{r['concurrency']:>7}{r['jobs']:>8}"
              f"{r['seconds']:>10.2f}{r['jobs_per_s']:>10.0f}"
              f"{r['client_cpu_us_per_job']:>15.0f}{r['postgres_cpu_us_per_job']:>17.0f}"
              f"{'-' if busy is None else f'{busy:.0f}':>8}")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--jobs-per-run", type=int, default=20)
    parser.add_argument("--workers", default="1,4,16")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--no-procrastinate", action="store_true")
    parser.add_argument(
        "--procrastinate-jobs",
        type=int,
        default=None,
        help="jobs for the procrastinate rounds (default: --jobs; it is ~30x slower)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds per configuration")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("procrastinate").setLevel(logging.ERROR)  # "app in __main__" notice
    counts = [int(w) for w in args.workers.split(",")]
    load_at_start = os.getloadavg()[0]
    print(f"postgres: {mask_url(ADMIN_DSN)}   load average: {load_at_start:.2f}")
    rows: list[dict[str, Any]] = []
    for workers in counts:
        for _ in range(args.repeat):
            rows.append(
                await tideway_round(workers, args.jobs, args.jobs_per_run, args.concurrency)
            )
            print_table(rows[-1:])
    if not args.no_procrastinate:
        pc_jobs = args.procrastinate_jobs or args.jobs
        for workers in counts:
            for _ in range(args.repeat):
                rows.append(await procrastinate_round(workers, pc_jobs, args.concurrency))
                print_table(rows[-1:])
    print("\nbest of each configuration:")
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        key = (row["system"], row["workers"])
        if key not in best or row["jobs_per_s"] > best[key]["jobs_per_s"]:
            best[key] = row
    print_table(list(best.values()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "claim+complete of no-op jobs",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": load_at_start},
        "postgres": mask_url(ADMIN_DSN),
        "jobs_per_run": args.jobs_per_run,
        "results": rows,
        "best": list(best.values()),
    }, indent=2) + "\n")  # fmt: skip
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
