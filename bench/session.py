"""A one-hour session (100 Hz IMU, 10 Hz GNSS) through the whole DAG, beside a floor.

What is timed
-------------
- **floor**: read the session file and write it as one Parquet file (pyarrow's multi-threaded
  C++ CSV reader, zstd Parquet): the least any pipeline must do with this file.
- **dag**: from ``upload_files`` (store the artifact, publish the notice) until the run is
  finalised: intake, all sixteen jobs on the real job engine and workers (claim, LISTEN/NOTIFY,
  group commit), every dataset written to the object store as Parquet and sha256-verified when
  read, the ClickHouse load (chDB in-process) and publish.

Not timed: synthesising and writing the file, creating the database, provisioning, and
starting the workers (a running system has warm workers: as ``tideway worker`` does, the
embedded ClickHouse is opened and ``warm_up`` starts the stage processes and imports the
stages once). Per job the script reads ``job_attempts`` and prints
its wall time, the gap between its last dependency ending and its start (scheduling), and the
body's own split (reading inputs, the pure stage, writing outputs).

    .venv/bin/python bench/session.py                   # 3 x 60 min sessions, process pool
    .venv/bin/python bench/session.py --minutes 10 --repeat 1 --compute thread

Each repetition uploads a different session (another seed) into the same running system and
measures the floor just before it; the job table is the median run's, and the summary gives the
minimum and the median of both (this machine is shared, so single runs are noisy).

**FIT row**: after the synthetic sessions, the real Wahoo ELEMNT ride
(``../shared/data/fit/2019-02-17-062644-ELEMNT-297E-195-0.fit``: 3.7 h, 13,471 records) goes
through the same running system and its whole-DAG time and job table are reported beside
them (``--fit-file`` names another file; ``--fit-file ''`` skips it).

Prints a table and writes ``bench/results/session.json``. Services: Postgres from
``TIDEWAY_BENCH_POSTGRES_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``),
NATS from ``TIDEWAY_BENCH_NATS_URL`` (default ``nats://127.0.0.1:4222``); ClickHouse is chDB.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Any  # noqa: E402

import nats  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from stages.batch import formats  # noqa: E402
from stages.batch.synth import synthesize  # noqa: E402
from stages.jobs.dag import DEFAULT_DAG  # noqa: E402
from streams import migrate  # noqa: E402
from streams.adapters import postgres  # noqa: E402
from streams.config import Settings  # noqa: E402
from streams.jobs.worker import run_worker  # noqa: E402
from streams.names import Names  # noqa: E402
from streams.sessions.clickhouse_jobs import hold_embedded_clickhouse  # noqa: E402
from streams.sessions.intake import provision_sessions, run_intake  # noqa: E402
from streams.sessions.progress import RunProgress, wait_for_run  # noqa: E402
from streams.sessions.stage_executors import SessionExecutors  # noqa: E402
from streams.sessions.upload import upload_files  # noqa: E402

ADMIN_DSN = os.environ.get(
    "TIDEWAY_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
NATS_URL = os.environ.get("TIDEWAY_BENCH_NATS_URL", "nats://127.0.0.1:4222")
RESULTS = ROOT / "bench" / "results" / "session.json"
WAHOO = ROOT.parent / "shared" / "data" / "fit" / "2019-02-17-062644-ELEMNT-297E-195-0.fit"
TARGET_S = 15.0


def make_session(minutes: float, fmt: str, path: Path, seed: int) -> dict[str, Any]:
    """Synthesise a session of at least ``minutes`` (laps of about 100 s) and write it."""
    laps = max(1, math.ceil(minutes * 60 / 100))
    while True:
        session = synthesize(laps=laps, imu_hz=100.0, gnss_hz=10.0, seed=seed)
        if session.truth.duration_s >= minutes * 60 or minutes * 60 < 120:
            break
        laps += 1
    path.write_bytes(formats.write(fmt, {"gnss": session.gnss, "imu": session.imu}))
    return {
        "laps": laps,
        "duration_s": round(session.truth.duration_s, 1),
        "imu_rows": session.imu.num_rows,
        "gnss_rows": session.gnss.num_rows,
        "file_bytes": path.stat().st_size,
        "format": fmt,
        "start_finish": session.truth.start_finish,
    }


def floor(path: Path, out: Path) -> dict[str, float]:
    """Read the file and write one Parquet file; the least any pipeline must do."""
    t0 = time.perf_counter()
    data = path.read_bytes()
    t1 = time.perf_counter()
    table = pacsv.read_csv(pa.BufferReader(data))
    t2 = time.perf_counter()
    pq.write_table(table, out, compression="zstd", compression_level=1)
    t3 = time.perf_counter()
    return {
        "read_s": t1 - t0,
        "parse_s": t2 - t1,
        "write_parquet_s": t3 - t2,
        "total_s": t3 - t0,
        "rows": table.num_rows,
    }


async def upload_and_wait(
    settings: Settings, *, device: str, path: Path, config: dict[str, Any] | None = None
) -> tuple[RunProgress, float, float]:
    """Upload one file and wait for its run: (final run, upload seconds, whole-DAG seconds)."""
    t0 = time.perf_counter()
    receipt = await upload_files(
        settings, tenant="bench", device=device, paths=[path], config=config
    )
    t_uploaded = time.perf_counter()
    final = await wait_for_run(
        settings,
        tenant="bench",
        artifact_set_hash=receipt.artifact_set_hash,
        poll_s=0.02,
        timeout_s=600,
    )
    return final, t_uploaded - t0, time.perf_counter() - t0


async def run_fit(settings: Settings, dsn: str, path: Path, work: Path) -> dict[str, Any]:
    """Upload one real FIT file into the running system and time its run (no floor)."""
    local = work / path.name  # a scratch copy: the shared data is never written to
    shutil.copyfile(path, local)
    final, _, wall_s = await upload_and_wait(settings, device="bench-fit", path=local)
    print(f"FIT {path.name}: whole DAG {wall_s:.3f} s, {final.status}")
    return {
        "file": path.name,
        "bytes": local.stat().st_size,
        "wall_s": wall_s,
        "status": final.status,
        "features_available": dict(final.features_available),
        "feature_reasons": dict(final.feature_reasons),
        "jobs": await job_timings(dsn, final.run_id),
    }


async def run_dag(
    args: argparse.Namespace,
    sessions: list[tuple[Path, dict[str, Any]]],
    work: Path,
    fit: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Run each session through one running system; the floor is measured just before each.

    With ``args.fit_file`` set and present, that FIT file runs last and its result is
    appended to ``fit``.
    """
    name = f"tw_bench_session_{uuid.uuid4().hex[:6]}"
    dsn = await postgres.create_database(ADMIN_DSN, name)
    settings = Settings(
        nats_url=NATS_URL,
        postgres_dsn=dsn,
        redis_url="redis://127.0.0.1:6379/0",
        clickhouse_dsn=f"chdb://{work / 'chdb'}",
        clickhouse_database="bench",
        namespace=f"b{uuid.uuid4().hex[:8]}",
        data_dir=work / "data",
        object_store=str(work / "objects"),
    )
    executors = SessionExecutors(
        settings, compute=args.compute, workers=args.stage_workers, dag=DEFAULT_DAG
    )
    results: list[dict[str, Any]] = []
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        await provision_sessions(settings)
        # As `tideway worker` starts (streams.processes.worker): the embedded ClickHouse is
        # opened before the first claim (~0.5 s the first time in a process), then the compute
        # processes are started.
        await hold_embedded_clickhouse(settings, pool=None)
        await executors.warm_up()
        stop = asyncio.Event()
        tasks = [asyncio.create_task(run_intake(settings, stop=stop))]
        tasks += [
            asyncio.create_task(
                run_worker(
                    settings,
                    executors=executors,
                    pool=None,
                    concurrency=args.concurrency,
                    stop=stop,
                    dag=DEFAULT_DAG,
                )
            )
            for _ in range(args.workers)
        ]
        await asyncio.sleep(0.5)  # let the workers LISTEN before the first job exists
        for i, (path, config) in enumerate(sessions):
            fl = await asyncio.to_thread(floor, path, work / f"floor-{i}.parquet")
            load = os.getloadavg()[0]
            final, upload_s, wall_s = await upload_and_wait(
                settings, device="bench-1", path=path, config=config
            )
            results.append(
                {
                    "wall_s": wall_s,
                    "upload_s": upload_s,
                    "floor": fl,
                    "loadavg_1m_before": load,
                    "status": final.status,
                    "features_available": dict(final.features_available),
                    "feature_reasons": dict(final.feature_reasons),
                    "laps": final.summary.get("laps", {}).get("count"),
                    "jobs": await job_timings(dsn, final.run_id),
                }
            )
            print(
                f"run {i + 1}: whole DAG {wall_s:.3f} s, floor {fl['total_s']:.3f} s, "
                f"load {load:.2f}, {final.status}"
            )
        fit_path = Path(args.fit_file) if args.fit_file else None
        if fit is not None and fit_path is not None:
            if fit_path.is_file():
                fit.append(await run_fit(settings, dsn, fit_path, work))
            else:
                print(f"FIT row skipped: {fit_path} is absent")
        stop.set()
        await asyncio.gather(*tasks)
        return results
    finally:
        await executors.aclose()
        await cleanup(settings, name)


async def job_timings(dsn: str, run_id: uuid.UUID) -> list[dict[str, Any]]:
    conn = await postgres.connect(dsn)
    try:
        run = await conn.fetchrow(
            "SELECT created_at, completed_at FROM processing_runs WHERE id = $1", run_id
        )
        rows = await conn.fetch(
            "SELECT j.name, j.state, j.output, a.started_at, a.ended_at, a.metrics FROM jobs j"
            " LEFT JOIN job_attempts a ON a.job_id = j.id WHERE j.run_id = $1",
            run_id,
        )
    finally:
        await conn.close()
    by_name = {r["name"]: r for r in rows}
    origin = run["created_at"]
    out = []
    for name in DEFAULT_DAG:
        r = by_name[name]
        if r["started_at"] is None:
            out.append({"job": name, "state": r["state"]})
            continue
        deps = [by_name[d.on]["ended_at"] for d in DEFAULT_DAG[name].deps]
        ready = max([d for d in deps if d is not None], default=origin)
        timings = (r["metrics"] or {}).get("timings", {})
        out.append(
            {
                "job": name,
                "state": r["state"],
                "start_s": (r["started_at"] - origin).total_seconds(),
                "end_s": (r["ended_at"] - origin).total_seconds(),
                "wall_s": (r["ended_at"] - r["started_at"]).total_seconds(),
                "wait_s": max(0.0, (r["started_at"] - ready).total_seconds()),
                "inputs_s": timings.get("inputs_s", 0.0) + timings.get("artifacts_s", 0.0),
                "stage_s": timings.get("stage_s"),
                "write_s": timings.get("write_s"),
                # materialise_clickhouse's own split: seconds per dataset loaded
                "loaded": [
                    {"dataset": e["dataset"], "rows": e["rows"], "seconds": e["seconds"],
                     "read_s": e.get("read_s"), "ddl_s": e.get("ddl_s")}
                    for e in (r["output"] or {}).get("loaded", [])
                ],
            }
        )
    out.append({"job": "(run finalised)", "end_s": (run["completed_at"] - origin).total_seconds()})
    return out


async def cleanup(settings: Settings, database: str) -> None:
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        for stream in (names.sessions_stream, names.sessions_dead_letter_stream):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(stream)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_object_store(names.session_bucket)
    finally:
        await nc.close()
    await postgres.drop_database(ADMIN_DSN, database)


def _f(v: Any) -> str:
    return "" if v is None else f"{v:7.3f}"


def report(meta: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the median run's job table and the summary over all runs."""
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    median = ordered[len(ordered) // 2]
    print(
        f"\nsession: {meta['duration_s'] / 60:.1f} min, {meta['imu_rows']:,} IMU + "
        f"{meta['gnss_rows']:,} GNSS rows, {meta['format']} {meta['file_bytes'] / 1e6:.1f} MB"
    )
    print(f"jobs of the median run ({median['wall_s']:.3f} s), seconds since the run was created:")
    cols = ("start", "wall", "wait", "inputs", "stage", "write")
    print(f"{'job':24} " + " ".join(f"{c:>7}" for c in cols))
    for j in median["jobs"]:
        if "wall_s" not in j:
            print(f"{j['job']:24} {_f(j.get('end_s'))} {j.get('state', '')}")
            continue
        print(
            f"{j['job']:24} {_f(j['start_s'])} {_f(j['wall_s'])} {_f(j['wait_s'])} "
            f"{_f(j['inputs_s'])} {_f(j['stage_s'])} {_f(j['write_s'])}"
        )
    for j in median["jobs"]:
        loaded = sorted(j.get("loaded") or [], key=lambda e: -e["seconds"])
        if loaded:
            rest = loaded[2:]
            print(f"{j['job']} by dataset: " + ", ".join(
                f"{e['dataset']} {e['seconds']:.3f} s ({e['rows']:,} rows)" for e in loaded[:2]
            ) + f", the other {len(rest)} {sum(e['seconds'] for e in rest):.3f} s together")
    walls = [r["wall_s"] for r in ordered]
    floors = sorted(r["floor"]["total_s"] for r in runs)
    summary = {
        "dag_min_s": walls[0],
        "dag_median_s": median["wall_s"],
        "floor_min_s": floors[0],
        "floor_median_s": floors[len(floors) // 2],
    }
    verdict = "meets" if summary["dag_median_s"] <= TARGET_S else "MISSES"
    print(
        f"\nfloor (read + one Parquet): min {summary['floor_min_s']:.3f} s, "
        f"median {summary['floor_median_s']:.3f} s"
    )
    print(
        f"whole DAG over {len(runs)} runs: min {summary['dag_min_s']:.3f} s, median "
        f"{summary['dag_median_s']:.3f} s "
        f"({summary['dag_median_s'] / summary['floor_median_s']:.1f}x the floor) - "
        f"{verdict} the {TARGET_S:g} s target; run status {median['status']}, "
        f"{median['laps']} laps"
    )
    return summary


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--format", default="csv", choices=["csv"], help="The floor reads CSV.")
    parser.add_argument("--compute", default="process", choices=["process", "thread"])
    parser.add_argument("--workers", type=int, default=1, help="Worker loops.")
    parser.add_argument("--concurrency", type=int, default=3, help="Jobs per worker loop.")
    parser.add_argument("--stage-workers", type=int, default=2, help="Stage pool size.")
    parser.add_argument("--repeat", type=int, default=3, help="Sessions run (median reported).")
    parser.add_argument("--fit-file", default=str(WAHOO), help="Real FIT file for the FIT row.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="tideway-bench-session-"))
    try:
        sessions: list[tuple[Path, dict[str, Any]]] = []
        meta: dict[str, Any] = {}
        for i in range(args.repeat):  # a new file each time: the same upload twice is one run
            path = work / f"session-{i}.{args.format}"
            meta = await asyncio.to_thread(make_session, args.minutes, args.format, path, 11 + i)
            sessions.append((path, {"start_finish": meta.pop("start_finish")}))
        load_before = os.getloadavg()
        fit: list[dict[str, Any]] = []
        runs = await run_dag(args, sessions, work, fit)
        load_after = os.getloadavg()
        summary = report(meta, runs)
        if fit:
            print(
                f"FIT row ({fit[0]['file']}): whole DAG {fit[0]['wall_s']:.3f} s, "
                f"{fit[0]['status']}"
            )
        print(
            f"load average (1 min) before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
            f"on {os.cpu_count()} CPUs (other processes slow every number above)"
        )
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "machine": {
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "loadavg_before": load_before,
                        "loadavg_after": load_after,
                    },
                    "args": vars(args),
                    "session": meta,
                    "summary": summary,
                    "target_s": TARGET_S,
                    "runs": runs,
                    "fit": fit[0] if fit else None,
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
