"""``tideway runs list|show|cancel|retry|backfill|schedule`` (``tideway worker`` is elsewhere).

``runs show`` draws the run's DAG as a tree: one node per job in dependency order with its
state, what it waits for (soft dependencies in parentheses), attempts and timings, and one child
per failed, timed-out or cancelled attempt with its error code, type, source and severity.
``runs retry`` resumes: jobs whose inputs, config and versions are unchanged reuse their verified
outputs (``streams.sessions.resume``). ``runs backfill`` reprocesses many sessions with the
current versions at a low priority, once per session (``streams.sessions.reprocess.backfill``);
``runs schedule`` has the workers run one by the clock (``streams.sessions.schedules``).
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text
from rich.tree import Tree

from schemas.api import DagJob, RunDag, operator_fields
from streams import registry
from streams.adapters import postgres
from streams.adapters.postgres import Conn
from streams.cli.options import JSON_OPTION, TENANT_OPTION, age_seconds, parse_id, tenant_name
from streams.cli.output import console, print_json, print_record, print_rows
from streams.cli.sessions import reprocess_cmd, rollback_cmd
from streams.config import load_settings
from streams.errors import UsageError
from streams.jobs import queue, run_actions
from streams.sessions.reprocess import BACKFILL_PRIORITY, BackfillItem, BackfillScope, backfill
from streams.sessions.schedules import (
    Schedule,
    add_schedule,
    list_schedules,
    remove_schedule,
)
from streams.views.runs import list_runs, show_run, status_counts

runs_app = typer.Typer(
    help="Processing runs: list, show, cancel, retry, backfill.", no_args_is_help=True
)

_ENDED = frozenset({"succeeded", "partial", "failed", "cancelled", "held_back"})

_STYLE = {
    "succeeded": "green",
    "failed": "bold red",
    "running": "yellow",
    "cancel_requested": "yellow",
    "retry_wait": "yellow",
    "queued": "cyan",
    "created": "dim",
    "skipped": "magenta",
    "cancelled": "red",
    "pending": "dim",
    "partial": "yellow",
}


@runs_app.command("list")
def list_command(
    tenant: str | None = TENANT_OPTION,
    all_tenants: bool = typer.Option(False, "--all-tenants", help="Every tenant's runs."),
    session: str | None = typer.Option(None, "--session", help="Only this session's runs."),
    status: str | None = typer.Option(None, "--status", help="Only runs in this state."),
    limit: int = typer.Option(50, "--limit", min=1),
    as_json: bool = JSON_OPTION,
) -> None:
    """List the tenant's runs (like every other list), newest first."""
    if all_tenants and tenant is not None:
        raise UsageError("--tenant and --all-tenants exclude each other")
    owner = None if all_tenants else tenant_name(tenant)

    async def main() -> None:
        conn = await postgres.connect(load_settings().postgres())
        try:
            tenant_id = await registry.tenant_id(conn, owner) if owner else None
            rows = [] if owner and tenant_id is None else await list_runs(
                conn, tenant_id=tenant_id, session_id=parse_id(session, "session") if session
                else None, status=status, limit=limit,
            )  # fmt: skip
        finally:
            await conn.close()
        data = [
            {**r.__dict__, "jobs": f"{r.jobs_total - r.jobs_open}/{r.jobs_total}"} for r in rows
        ]
        columns = ("id", "tenant", "status", "jobs", "priority", "created_at", "failure_reason")
        print_rows(data, columns=columns, title="Processing runs", as_json=as_json)

    asyncio.run(main())
    if not as_json:  # what will start runs next, by the clock
        for s in _schedules(owner):
            console.print(f"scheduled backfill {s.name}: {s.cron} (UTC), next at "
                          f"{s.next_run_at.isoformat()}"
                          + (f", last: {_schedule_row(s)['last_outcome']}" if s.last_run_at
                             else ""))


@runs_app.command("show")
def show_command(
    run_id: str = typer.Argument(..., help="The run's id."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show a run's DAG with each job's state, attempts and timings."""

    async def main() -> RunDag:
        conn = await postgres.connect(load_settings().postgres())
        try:
            return await show_run(conn, parse_id(run_id, "run"))
        finally:
            await conn.close()

    view = asyncio.run(main())
    if as_json:
        print_json(_as_json(view))
        return
    console.print(render_run(view))


@runs_app.command("cancel")
def cancel_command(run_id: str = typer.Argument(..., help="The run's id.")) -> None:
    """Cancel a run: jobs not started are cancelled, running ones stop at a checkpoint.
    A run that has already ended is refused (RUN_TERMINAL, exit 1) and left as it was."""

    settings = load_settings()

    async def main() -> queue.CancelSummary:
        conn = await postgres.connect(settings.postgres())
        try:
            return await run_actions.cancel_run(
                conn, parse_id(run_id, "run"), channel=queue.jobs_channel(settings)
            )
        finally:
            await conn.close()

    summary = asyncio.run(main())
    print_record(
        {"run": summary.run_id, "status": summary.status.value,
         "jobs cancelled": summary.cancelled, "running jobs asked to stop": summary.requested},
        title="Cancelled",
    )  # fmt: skip


@runs_app.command("retry")
def retry_command(
    run_id: str = typer.Argument(..., help="A failed, cancelled or partial run."),
    requested_by: str = typer.Option("operator", "--requested-by"),
) -> None:
    """Start a new run repeating this one (same artifacts, config and versions); jobs whose
    inputs are unchanged reuse the verified outputs of the earlier run instead of recomputing."""
    settings = load_settings()

    async def main() -> queue.EnqueuedRun:
        conn = await postgres.connect(settings.postgres())
        try:
            return await run_actions.retry_run(
                conn, parse_id(run_id, "run"), requested_by=requested_by,
                channel=queue.jobs_channel(settings),
                default_attempts=settings.retry.job_max_attempts,
            )  # fmt: skip
        finally:
            await conn.close()

    new = asyncio.run(main())
    print_record({"run": new.run_id, "retry of": run_id, "status": "pending"}, title="Retry")


@runs_app.command("backfill")
def backfill_command(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's sessions."),
    device: str | None = typer.Option(None, "--device", help="Only this device's sessions."),
    since: datetime | None = typer.Option(None, "--since", help="Uploaded at or after (UTC)."),
    until: datetime | None = typer.Option(None, "--until", help="Uploaded before (UTC)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many sessions."),
    priority: int = typer.Option(
        BACKFILL_PRIORITY, "--priority", help="Priority of the new runs (uploads: 100)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would run; start nothing."),
    wait: bool = typer.Option(False, "--wait", help="Follow the new runs until they end."),
    requested_by: str = typer.Option("operator", "--requested-by"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Reprocess sessions with the current versions, once each (sessions with a run at these
    versions and config are left alone, so running it again starts nothing new)."""
    settings = load_settings()
    scope = BackfillScope(
        tenant=tenant, device=device, since=_utc(since), until=_utc(until), limit=limit
    )

    async def main() -> tuple[list[BackfillItem], Counter[str]]:
        conn = await postgres.connect(settings.postgres())
        try:
            with _progress(as_json) as bar:
                task = bar.add_task("sessions", total=None)

                def advance(item: BackfillItem, done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total)

                items = await backfill(
                    conn, scope, dry_run=dry_run, priority=priority, requested_by=requested_by,
                    namespace=settings.namespace,
                    default_attempts=settings.retry.job_max_attempts, on_item=advance,
                )  # fmt: skip
                bar.update(task, total=len(items), completed=len(items))
                started = [i.run_id for i in items if i.action == "started" and i.run_id]
                ended: Counter[str] = Counter()
                if wait and started:
                    ended = await _follow(conn, started, bar)
        finally:
            await conn.close()
        return items, ended

    items, ended = asyncio.run(main())
    columns = ("session_id", "tenant", "device", "uploaded_at", "action", "run_id", "status")
    rows = [{c: getattr(i, c) for c in columns} for i in items]
    title = "Backfill (dry run)" if dry_run else "Backfill"
    print_rows(rows, columns=columns, title=title, as_json=as_json)
    if not as_json:
        counts = Counter(i.action for i in items)
        line = ", ".join(f"{n} {action}" for action, n in sorted(counts.items())) or "no sessions"
        if ended:
            line += "; runs ended: " + ", ".join(
                f"{n} {'held back by the drift gate (DRIFT_EXCEEDED)' if s == 'held_back' else s}"
                for s, n in sorted(ended.items()))
        console.print(line)


@runs_app.command("promote")
def promote_command(
    run_id: str = typer.Argument(..., help="The run to make its session's active run."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Make a run its session's active run - one the drift gate held back (DRIFT_EXCEEDED) -
    once every dataset of it reads back with its sha256 (``sessions rollback`` goes back)."""
    from streams.objects import ObjectStore
    from streams.sessions.reprocess import promote

    owner, rid = tenant_name(tenant), parse_id(run_id, "run")
    settings = load_settings()

    async def main() -> Any:
        conn = await postgres.connect(settings.postgres())
        try:
            return await promote(conn, tenant=owner, run_id=rid, requested_by="cli",
                                 store=ObjectStore(settings.objects()))
        finally:
            await conn.close()

    moved = asyncio.run(main())
    data = {"session_id": str(moved.session_id), "from_run": str(moved.from_run),
            "to_run": str(moved.to_run)}
    if as_json:
        print_json(data)
    else:
        console.print(f"session {moved.session_id}: active run {moved.from_run} -> "
                      f"{moved.to_run}")


schedule_app = typer.Typer(
    help="Scheduled backfills: add (or replace), list, remove. Workers run them.",
    no_args_is_help=True)
runs_app.add_typer(schedule_app, name="schedule")

_SCHEDULE_COLUMNS = ("tenant", "name", "cron", "device", "uploaded_within", "priority",
                     "next_run_at", "last_run_at", "last_outcome", "last_error")
def _age_seconds(value: str) -> float:
    """``90s``, ``15m``, ``2h``, ``7d`` in seconds (positive)."""
    age = age_seconds(value)
    if age is None or age <= 0:
        raise UsageError(f"not an age: {value!r} (like 12h or 7d)")
    return age


def _schedule_row(s: Schedule) -> dict[str, Any]:
    within = s.uploaded_within_s
    return {**operator_fields(s),
            "uploaded_within": "any time" if within is None else _secs_text(within),
            "last_outcome": ", ".join(f"{n} {a}" for a, n in sorted((s.last_outcome or {}).items()))
            or ("—" if s.last_run_at is None else "no sessions")}


def _secs_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@schedule_app.command("add")
def schedule_add(
    name: str = typer.Argument(..., help="The schedule's name (unique in the tenant)."),
    cron: str = typer.Option(..., "--cron", help="When, in UTC: '0 3 * * *', @daily..."),
    device: str | None = typer.Option(None, "--device", help="Only this device's sessions."),
    uploaded_within: str | None = typer.Option(
        None, "--uploaded-within", help="Only sessions uploaded this long before each tick "
        "(12h, 7d; default: every session)."),
    priority: int = typer.Option(BACKFILL_PRIORITY, "--priority", help="Of the runs it starts."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Schedule a backfill of the tenant's sessions (replaces a schedule of the same name)."""
    owner = tenant_name(tenant)
    within = _age_seconds(uploaded_within) if uploaded_within else None

    async def main() -> Schedule:
        conn = await postgres.connect(load_settings().postgres())
        try:
            return await add_schedule(conn, tenant=owner, name=name, cron=cron, device=device,
                                      uploaded_within_s=within, priority=priority,
                                      created_by=f"cli {getpass.getuser()}")
        finally:
            await conn.close()

    saved = asyncio.run(main())
    if as_json:
        print_json(operator_fields(saved))
        return
    console.print(f"scheduled backfill {saved.name} of {saved.tenant}: {saved.cron} (UTC); "
                  f"first at {saved.next_run_at.isoformat()}")


@schedule_app.command("list")
def schedule_list(
    tenant: str | None = TENANT_OPTION,
    all_tenants: bool = typer.Option(False, "--all-tenants", help="Every tenant's schedules."),
    as_json: bool = JSON_OPTION,
) -> None:
    """The scheduled backfills, their next and last tick and what the last one did."""
    if all_tenants and tenant is not None:
        raise UsageError("--tenant and --all-tenants exclude each other")
    found = _schedules(None if all_tenants else tenant_name(tenant))
    print_rows([_schedule_row(s) for s in found], columns=_SCHEDULE_COLUMNS,
               title="Scheduled backfills", as_json=as_json)


@schedule_app.command("remove")
def schedule_remove(name: str = typer.Argument(..., help="The schedule's name."),
                    tenant: str | None = TENANT_OPTION) -> None:
    """Remove a scheduled backfill (runs it started are left as they are)."""
    owner = tenant_name(tenant)

    async def main() -> None:
        conn = await postgres.connect(load_settings().postgres())
        try:
            await remove_schedule(conn, owner, name)
        finally:
            await conn.close()

    asyncio.run(main())
    console.print(f"removed scheduled backfill {name} of {owner}")


def _schedules(tenant: str | None) -> list[Schedule]:
    async def main() -> list[Schedule]:
        conn = await postgres.connect(load_settings().postgres())
        try:
            return await list_schedules(conn, tenant)
        finally:
            await conn.close()

    return asyncio.run(main())


# Issue 4 names them as run commands; they act on a session's runs, so both spellings work.
runs_app.command("reprocess")(reprocess_cmd)
runs_app.command("rollback")(rollback_cmd)


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=quiet, transient=False,
    )  # fmt: skip


async def _follow(conn: Conn, run_ids: list[uuid.UUID], bar: Progress) -> Counter[str]:
    """Poll the runs until every one has ended, advancing a progress bar."""
    task = bar.add_task("runs ended", total=len(run_ids))
    while True:
        counts = await status_counts(conn, run_ids)
        done = sum(n for status, n in counts.items() if status in _ENDED)
        bar.update(task, completed=done)
        if done >= len(run_ids):
            return counts
        await asyncio.sleep(1.0)


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _as_json(view: RunDag) -> dict[str, Any]:
    """What ``runs show --json`` prints: the run's row and everything around the DAG."""
    data = operator_fields(view)
    del data["run_id"], data["status"]  # the run's row says them
    for job in data["jobs"]:
        job["busy_s"] = job.pop("busy_s")  # last, where it has always been printed
    return data


def render_run(view: RunDag) -> Tree:
    """The run as a rich tree: jobs in dependency order, failed attempts beneath them."""
    run = view.run
    head = Text.assemble(
        ("run ", "bold"), str(run.id), "  ", (run.status, _STYLE.get(run.status, "")),
        f"  {run.jobs_total - run.jobs_open}/{run.jobs_total} jobs done",
        f"  tenant {run.tenant}  session {run.session_id}",
    )  # fmt: skip
    tree = Tree(head)
    if run.failure_reason:
        tree.add(Text(f"failure: {run.failure_reason}", style="red"))
    check = view.summary.get("verification")
    if check:  # publish_session's health check (streams.sessions.verify)
        if check.get("ok"):
            tree.add(Text(
                f"verification: ok ({check.get('datasets')} datasets, "
                f"{check.get('bytes_read', 0) / 1e6:.1f} MB hashed, "
                f"{len(check.get('tables') or {})} ClickHouse tables counted)", style="green",
            ))  # fmt: skip
        else:
            node = tree.add(Text("verification: FAILED", style="bold red"))
            for problem in check.get("problems") or []:
                node.add(Text(problem, style="red"))
    drift = view.summary.get("drift")
    if drift:  # publish_session's drift gate against the run it would replace
        held = drift.get("exceeded")
        node = tree.add(Text(
            f"drift gate: {'HELD BACK (DRIFT_EXCEEDED)' if held else 'within limits'} against "
            f"run {drift.get('against_run')}"
            + (" - not made active; `tideway runs promote` makes it so" if held else ""),
            style="bold yellow" if held else "green"))
        for c in drift.get("checks") or []:
            change = "" if c.get("change") is None else f" (change {c['change']:g}, " \
                f"limit {c['limit']:g})"
            node.add(Text(f"{c['figure']}: {c['before']} -> {c['after']}{change}",
                          style="yellow" if c.get("exceeded") else "dim"))
    if view.features_available:
        flags = ", ".join(
            name if ok else f"{name} ✗ {view.feature_reasons.get(name, '')}".rstrip()
            for name, ok in sorted(view.features_available.items())
        )
        tree.add(Text(f"features: {flags}"))
    for decision in view.gating:
        tree.add(Text(f"gating: {decision['job']} skipped ({decision['reason']}) - "
                      f"{decision['detail']}", style="magenta"))  # fmt: skip
    for job in view.jobs:
        node = tree.add(_job_line(job))
        for attempt in job.attempts:
            if attempt.status == "succeeded":
                continue
            node.add(Text(
                f"attempt {attempt.number} {attempt.status} {attempt.error_code} "
                f"({attempt.error_type}/{attempt.error_source}, severity {attempt.severity}) "
                f"on {attempt.worker} after {_secs(attempt.duration_s)}: {attempt.message}",
                style="red" if attempt.status != "cancelled" else "dim",
            ))  # fmt: skip
    return tree


def _job_line(job: DagJob) -> Text:
    waits = [dep.on if dep.hard else f"({dep.on})" for dep in job.deps]
    busy = sum(a.duration_s or 0.0 for a in job.attempts)
    text = Text.assemble(
        (f"{job.name:<24}", "bold" if job.critical else ""),
        (f"{job.state:<17}", _STYLE.get(job.state, "")),
        f"attempts {job.attempt_count}/{job.max_attempts}  ",
        f"started {_time(job.started_at)}  busy {_secs(busy if job.attempts else None)}",
    )
    if waits:
        text.append(f"  after {', '.join(waits)}", style="dim")
    if job.skip_reason and job.state in ("skipped", "cancelled"):
        text.append(f"  [{job.skip_reason}]", style="magenta")
    if job.datasets:
        text.append(f"  → {', '.join(job.datasets)}", style="green")
    if job.state == "retry_wait" and job.next_run_at is not None:
        text.append(f"  retry at {_time(job.next_run_at)}", style="yellow")
    return text


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%H:%M:%S")

