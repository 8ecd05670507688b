"""``tideway demo``: run the whole system for a bounded time, feed it, and account for everything.

It starts what is not configured (like ``tideway up``), registers a simulated fleet, uploads a
synthetic race session, publishes fleet traffic for ``duration`` seconds while showing live
progress, waits until every stored envelope has a recorded status and the session's run has
ended, then prints a summary. The exit code is 0 only when nothing is missing — every envelope
JetStream stored is accounted for in Postgres and the session run ended succeeded or partial —
and 3 (``ExitCode.FAILED``) otherwise.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Group
from rich.live import Live
from rich.table import Table

from streams.adapters import postgres
from streams.adapters.nats import connect_nats
from streams.adapters.redis import redis_client
from streams.cli.exit_codes import ExitCode
from streams.cli.output import console
from streams.cli.services import console_url, services_table
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.names import Names
from streams.observability.events import ProcessHooks
from streams.system import system
from streams.views import demo as demo_counts

DEMO_TENANT = "demo"
DEMO_CAR = "demo-car"
DRAIN_TIMEOUT_S = 120.0



@dataclass(kw_only=True)
class _Board:
    """What the live view shows; updated by the tasks, drawn by the loop."""

    sent: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    run_status: str = "uploading"
    run_jobs: str = ""
    started: float = field(default_factory=time.monotonic)

    def render(self) -> Group:
        fleet = Table(title=f"fleet traffic ({time.monotonic() - self.started:.0f}s)")
        fleet.add_column("published")
        fleet.add_column("recorded")
        for status in sorted(self.statuses):
            fleet.add_column(status)
        fleet.add_row(
            f"{self.sent:,}",
            f"{sum(self.statuses.values()):,}",
            *(f"{self.statuses[s]:,}" for s in sorted(self.statuses)),
        )
        session = Table(title="session run")
        session.add_column("status")
        session.add_column("jobs")
        session.add_row(self.run_status, self.run_jobs)
        return Group(fleet, session)


def write_demo_session(directory: Path, *, laps: int) -> tuple[Path, dict[str, Any]]:
    """A synthetic race session (GNSS + IMU, canonical CSV) and its ground truth."""
    from stages.batch import formats
    from stages.batch.synth import synthesize

    session = synthesize(laps=laps, imu_hz=100, gnss_hz=10, seed=7)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"demo-session-{laps}laps.csv.gz"
    path.write_bytes(
        formats.write("csv", {"gnss": session.gnss, "imu": session.imu}, compressed=True)
    )
    truth: dict[str, Any] = session.truth.truth_json()
    return path, truth


class _Probe:
    """One Postgres and one NATS connection the demo reads its progress through.

    Opened once for the whole demo: the live view polls twice a second, and a new connection
    per poll would be most of the work it does.
    """

    def __init__(self, settings: Settings, conn: Any, nc: Any) -> None:
        names = Names(namespace=settings.namespace)
        self._pattern = names.telemetry_subject(DEMO_TENANT, "%", "%")
        self._stream = names.telemetry_stream
        self._conn = conn
        self._nc = nc

    @classmethod
    async def open(cls, settings: Settings) -> _Probe:
        conn = await postgres.connect(settings.postgres())
        try:
            nc = await connect_nats(settings.nats, name="tideway-demo")
        except BaseException:
            await conn.close()
            raise
        return cls(settings, conn, nc)

    async def close(self) -> None:
        await self._nc.close()
        await self._conn.close()

    async def status_counts(self, baseline: dict[str, int] | None = None) -> dict[str, int]:
        """Envelopes of the demo tenant per status, minus ``baseline`` (an earlier demo's)."""
        found = await demo_counts.status_counts(self._conn, self._pattern, DEMO_TENANT)
        base = baseline or {}
        counts = {status: n - base.get(status, 0) for status, n in found.items()}
        return {status: n for status, n in counts.items() if n}

    async def last_seq(self) -> int:
        """The TELEMETRY stream's last sequence: the delta over the demo is what it stored."""
        info = await self._nc.jetstream().stream_info(self._stream)
        return int(info.state.last_seq)

    async def telemetry_rows(self) -> int:
        return await demo_counts.telemetry_rows(self._conn)


async def run_demo(
    settings: Settings, *, duration: float, devices: int, rate: float, laps: int,
    observability: ProcessHooks | None = None, metrics: str | None = None,
) -> int:
    """Run the demo; returns the process exit code (``observability``: the process's)."""
    async with system(settings, hooks=observability, metrics=metrics) as (s, started, stop):
        console.print(services_table(started.services, s, metrics=metrics))
        console.print(
            f"console: {console_url(s)} (sign in with a key from "
            f"`tideway api-keys create NAME --tenant {DEMO_TENANT}`)",
            markup=False,
        )
        probe = await _Probe.open(s)
        try:
            return await _feed_and_watch(
                s, probe, stop, duration=duration, devices=devices, rate=rate, laps=laps
            )
        finally:
            await probe.close()


async def _feed_and_watch(
    s: Settings,
    probe: _Probe,
    stop: asyncio.Event,
    *,
    duration: float,
    devices: int,
    rate: float,
    laps: int,
) -> int:
    """Register the fleet, upload the session, publish, show progress, then summarise."""
    from streams.ingest.simulate import ensure_fleet, simulate
    from streams.sessions.progress import RunProgress, wait_for_run
    from streams.sessions.upload import upload_files

    board = _Board()
    baseline = await probe.status_counts()
    first_seq = await probe.last_seq()
    await ensure_fleet(s, tenant=DEMO_TENANT, devices=devices)
    path, truth = await asyncio.to_thread(write_demo_session, s.data_dir / "demo", laps=laps)
    # The track's timing line, as an operator would configure it for a circuit.
    config = {"start_finish": truth["start_finish"]}
    receipt = await upload_files(
        s, tenant=DEMO_TENANT, device=DEMO_CAR, paths=[path], config=config
    )

    def on_run(p: RunProgress) -> None:
        board.run_status = p.status
        board.run_jobs = f"{p.jobs_done}/{p.jobs_total} done"

    def on_sim(p: Any) -> None:
        board.sent = p.sent

    run_task = asyncio.create_task(
        wait_for_run(
            s,
            tenant=DEMO_TENANT,
            artifact_set_hash=receipt.artifact_set_hash,
            on_progress=on_run,
            timeout_s=duration + DRAIN_TIMEOUT_S,
        )
    )
    sim_task = asyncio.create_task(
        simulate(
            s,
            tenant=DEMO_TENANT,
            devices=devices,
            rate=rate,
            duration=duration,
            on_progress=on_sim,
        )
    )
    deadline = time.monotonic() + duration + DRAIN_TIMEOUT_S
    with Live(board.render(), console=console, refresh_per_second=4) as live:
        while time.monotonic() < deadline and not stop.is_set():
            board.statuses = await probe.status_counts(baseline)
            live.update(board.render())
            if sim_task.done() and run_task.done():
                stored = await probe.last_seq() - first_seq
                if sum(board.statuses.values()) >= stored:
                    break
            await asyncio.sleep(0.5)
    if not console.is_terminal:
        # Piped, rich writes the last frame without its final newline (on a terminal the
        # cursor handling ends the line): without one the summary's title would continue it.
        console.line()
    report = await sim_task
    progress = await run_task
    stored = await probe.last_seq() - first_seq
    return await _summary(s, probe, report, stored, progress, truth, baseline)


async def _summary(
    s: Settings,
    probe: _Probe,
    report: Any,
    stored: int,
    progress: Any,
    truth: dict[str, Any],
    baseline: dict[str, int],
) -> int:
    statuses = await probe.status_counts(baseline)
    telemetry = await probe.telemetry_rows()
    names = Names(namespace=s.namespace)
    rows = await demo_counts.analytics_rows(
        ClickHouse(s.clickhouse(), s.clickhouse_database), names.analytics_table
    )
    r = redis_client(s.redis())
    try:
        hot = len([k async for k in r.scan_iter(match=names.redis_prefix + "state:*")])
    finally:
        await r.aclose()

    recorded = sum(statuses.values())
    table = Table(title="Tideway demo summary")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("envelopes published (incl. duplicates)", f"{report.published:,}")
    table.add_row(
        "duplicates sent / absorbed by JetStream's Nats-Msg-Id window",
        f"{report.duplicates_sent:,} / {report.duplicates_absorbed:,}",
    )
    table.add_row("envelopes stored by JetStream", f"{stored:,}")
    table.add_row("envelopes with a recorded status", f"{recorded:,}")
    for status, n in sorted(statuses.items()):
        expected = report.expected.get(status)
        note = f" (simulated {expected:,})" if expected is not None else ""
        table.add_row(f"  {status}", f"{n:,}{note}")
    table.add_row("telemetry rows in Postgres (all demos)", f"{telemetry:,}")
    table.add_row("analytics rows in ClickHouse (all demos)", f"{rows:,}")
    table.add_row("devices with hot state (Redis)", f"{hot:,}")
    table.add_row("session run", progress.status)
    laps = (progress.summary or {}).get("laps", {})
    true_laps = len(truth.get("laps", []))
    table.add_row("laps found / true laps", f"{laps.get('count', '?')} / {true_laps}")
    if laps.get("best_lap_time_s") is not None:
        table.add_row("best lap", f"{laps['best_lap_time_s']:.2f} s (lap {laps.get('best_lap')})")
    features = ", ".join(k for k, v in sorted(progress.features_available.items()) if v)
    table.add_row("features available", features or "none")
    console.print(table)
    ok = recorded == stored and progress.status in {"succeeded", "partial"}
    if not ok:
        console.print("[bold red]demo incomplete:[/] not every envelope or job is accounted for")
        console.print(orjson.dumps({"statuses": statuses, "stored": stored}).decode())
    return ExitCode.OK if ok else ExitCode.FAILED
