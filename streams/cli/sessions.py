"""``tideway sessions upload | list | show | lap | export | synth | reprocess | rollback | dlq``.

Uploads store the files in the object store and publish a notice for intake (``tideway up``
or a ``tideway intake`` process must be running for the run to be created and processed);
``--wait`` follows the run until it ends. ``reprocess`` / ``rollback`` move a session's active
run blue/green (see ``streams.sessions.reprocess``). ``synth`` writes a synthetic session file
and its ground truth (``<out>.truth.json``) for tests and the demo. ``export`` writes the active
run's laps, sectors or delta as CSV, or the session with its laps as GPX or FIT. ``reprocess`` and
``rollback`` are ``tideway runs`` commands too (:mod:`streams.cli.runs`).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import typer

from schemas.api import SessionSummary, operator_fields
from streams.cli.exit_codes import ExitCode
from streams.cli.options import (
    JSON_OPTION,
    TENANT_OPTION,
    parse_id,
    run_with_connection,
    tenant_name,
)
from streams.cli.output import console, err_console, print_json, print_record, print_rows
from streams.cli.session_dlq import session_dlq_app
from streams.config import Settings, load_settings
from streams.errors import NotFoundError, UsageError
from streams.sessions.notice import run_config_from_json, session_date_from_text

if TYPE_CHECKING:
    from streams.jobs.enqueue import EnqueuedRun



def _config(raw: str | None) -> dict[str, Any]:
    """``--config``: JSON text or ``@file``, checked as the API checks its own."""
    if not raw:
        return {}
    text = Path(raw[1:]).read_text(encoding="utf-8") if raw.startswith("@") else raw
    return run_config_from_json(text, name="--config")


def _follow(settings: Settings, *, as_json: bool, timeout: float, **which: Any) -> Any:
    from streams.sessions.progress import RunProgress, wait_for_run

    def show(p: RunProgress) -> None:
        if not as_json:
            running = sorted(n for n, s in p.jobs.items() if s == "running")
            console.print(
                f"[{p.elapsed_s:6.1f}s] run {p.status}: {p.jobs_done}/{p.jobs_total} jobs done"
                + (f"; running {', '.join(running)}" if running else "")
            )

    return asyncio.run(wait_for_run(settings, on_progress=show, timeout_s=timeout, **which))


def _errors(progress: Any) -> list[dict[str, Any]]:
    """The failed jobs' own codes, with what each means and how to fix it (the run's
    ``failure_reason`` names only the job's generic ``<JOB>_FAILED``)."""
    from schemas.error_codes import info

    out = []
    for err in progress.errors:
        known = info(err["code"]) if err.get("code") else None
        out.append({**err, "hint": known.meaning if known is not None else None})
    return out


def _print_final(progress: Any, *, as_json: bool, session_id: Any = None) -> None:
    errors = _errors(progress)
    critical = next((e for e in errors if e["critical"] and e["code"]), None)
    data = {
        **({"session_id": str(session_id)} if session_id is not None else {}),
        "run_id": str(progress.run_id),
        "status": progress.status,
        # The failed critical job's own code (NO_SESSION_DATE), not its PARSE_RAW_FAILED.
        "failure_reason": (
            f"{critical['job']}: {critical['code']}" if critical else progress.failure_reason
        ),
        "features_available": dict(progress.features_available),
        "feature_reasons": dict(progress.feature_reasons),
        "jobs": dict(progress.jobs),
        "errors": errors,
        "notes": list(progress.notes),
        "elapsed_s": round(progress.elapsed_s, 3),
    }
    if as_json:
        print_json(data)
    else:
        shown = {k: v for k, v in data.items() if k not in {"jobs", "errors", "notes"}}
        print_record(shown, title="run finished")
        for err in errors:
            err_console.print(
                f"{err['job']} failed: {err['code']}: {err['message']}"
                + (f"\n  hint: {err['hint']}" if err["hint"] else ""),
                soft_wrap=True,
            )
        for note in progress.notes:
            err_console.print(f"note: {note}", soft_wrap=True)
    if progress.status not in {"succeeded", "partial"}:
        raise typer.Exit(ExitCode.FAILED)


def _print_laps(report: dict[str, Any]) -> None:
    line = report["line"]
    if line is not None:
        print_record({"source": line["source"], "end 1": f"{line['lat1']:.7f}, {line['lon1']:.7f}",
                      "end 2": f"{line['lat2']:.7f}, {line['lon2']:.7f}"},
                     title="start/finish line")
    if not report["laps"]:
        console.print(f"no laps ({report['reason'] or 'none found'})")
        return
    # Rounded values and one notes column: the table fits an 80-column terminal (--json has
    # every field at full precision).
    def notes(lap: dict[str, Any]) -> str:
        words = ["best"] if lap["is_best"] else []
        words += [w for w, on in (("pit in", lap["pit_in"]), ("pit out", lap["pit_out"]))
                  if on] or (["pit"] if lap["pit"] else [])
        words += [f"stopped {lap['stopped_s']:.0f}s"] if lap["stopped_s"] else []
        return ", ".join(words + ([] if lap["valid"] else ["not valid"]))

    def num(value: float | None, digits: int) -> str:
        return "" if value is None else f"{value:.{digits}f}"

    def timed(value: float | None, sigma: float | None) -> str:
        return num(value, 3) + ("" if sigma is None else f" ±{sigma:.3f}")

    rows = [{"lap": lap["lap"], "time s": timed(lap["lap_time_s"], lap["lap_time_sigma_s"]),
             "Δ best s": num(lap["delta_to_best_s"], 3), "km": num(
                 None if lap["distance_m"] is None else lap["distance_m"] / 1000, 3),
             "top m/s": num(lap["max_speed_mps"], 1), "avg m/s": num(lap["avg_speed_mps"], 1),
             "notes": notes(lap)} for lap in report["laps"]]
    print_rows(rows, title="laps", columns=list(rows[0]))
    _print_sectors(report)


def _print_sectors(report: dict[str, Any]) -> None:
    """Sector times (``*``: the best valid one of its sector), the rolling best, and the
    theoretical best under them."""
    count = max((len(lap["sectors"]) for lap in report["laps"]), default=0)
    if count:
        rows = []
        for lap in report["laps"]:
            row: dict[str, Any] = {"lap": lap["lap"]}
            by_number = {x["sector"]: x for x in lap["sectors"]}
            for k in range(1, count + 1):
                x = by_number.get(k)
                row[f"S{k} s"] = "" if x is None else (
                    f"{x['time_s']:.3f}{'*' if x['is_best'] else ' '} ±{x['sigma_s']:.3f}"
                    if x["sigma_s"] is not None else f"{x['time_s']:.3f}")
            best = lap["rolling_best_s"]
            row["rolling best s"] = "" if best is None else f"{best:.3f}"
            rows.append(row)
        print_rows(rows, title="sectors (* best)", columns=list(rows[0]))
    facts = []
    if report["theoretical_best_s"] is not None:
        facts.append(f"theoretical best {report['theoretical_best_s']:.3f} s (best sectors)")
    if report["theoretical_best_mini_s"] is not None:
        facts.append(f"{report['theoretical_best_mini_s']:.3f} s (best mini-sectors)")
    if report["reference_lap"] is not None:
        facts.append(f"reference lap {report['reference_lap']}")
    if facts:
        console.print("; ".join(facts), soft_wrap=True)


sessions_app = typer.Typer(help="Whole-session files: upload, inspect, reprocess.",
                           no_args_is_help=True)
sessions_app.add_typer(session_dlq_app, name="dlq")


@sessions_app.command("upload")
def upload(
    files: list[Path] = typer.Argument(..., help="Session file(s), one session."),
    device: str = typer.Option(..., "--device", help="Device the session came from."),
    tenant: str | None = TENANT_OPTION,
    priority: int = typer.Option(100, "--priority",
                                 help="Higher runs first (reprocess 0, backfill -100)."),
    config: str | None = typer.Option(None, "--config", help="Run config JSON or @file."),
    date: str | None = typer.Option(
        None, "--date", help="Day recorded (YYYY-MM-DD), for NMEA logs that carry no date "
        "and FIT files whose timestamps count from power-on."),
    wait: bool = typer.Option(False, "--wait", help="Follow the run until it ends."),
    timeout: float = typer.Option(600.0, "--timeout", help="Give up waiting after this."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Store FILES as one session and hand them to intake (exit 3 over a daily quota)."""
    from streams.cli.output import fail
    from streams.observability.tracing import configure_tracing
    from streams.sessions.quotas import QuotaExceededError
    from streams.sessions.upload import upload_files

    configure_tracing("tideway-cli")  # only when the OTEL_* environment asks for traces
    owner = tenant_name(tenant)
    settings = load_settings()
    try:
        receipt = asyncio.run(upload_files(
            settings, tenant=owner, device=device, paths=files, priority=priority,
            config=_config(config),
            date=session_date_from_text(date, name="--date")))
    except QuotaExceededError as exc:  # the command ran; the answer is "not today"
        fail(exc.describe(), code=ExitCode.FAILED)
    # A session is its files (its id is derived from their hashes): the same files uploaded
    # for another device are the session that device already has, not a new one - say so.
    earlier = _earlier_device(owner, receipt.session_id, device)
    if as_json and not wait:
        print_json({**receipt.as_dict(), "existing_session_device": earlier})
    elif not as_json:
        console.print(f"uploaded {len(receipt.artifacts)} file(s) as session "
                      f"{receipt.session_id} (artifact set {receipt.artifact_set_hash[:12]})")
    if earlier is not None:
        err_console.print(
            f"note: these files were uploaded before for device {earlier}: session "
            f"{receipt.session_id} is that upload's session (device {earlier}), not a new "
            f"one for {device}", soft_wrap=True)
    if wait:
        final = _follow(settings, as_json=as_json, timeout=timeout, tenant=owner,
                        artifact_set_hash=receipt.artifact_set_hash)
        _print_final(final, as_json=as_json, session_id=receipt.session_id)


def _earlier_device(tenant: str, session_id: Any, device: str) -> str | None:
    """The device of an existing session ``session_id`` when it is not ``device``."""
    from streams.registry import tenant_id
    from streams.views import sessions as queries

    async def work(conn: Any) -> str | None:
        tid = await tenant_id(conn, tenant)
        if tid is None:
            return None
        try:
            found = await queries.get_session(conn, tid, session_id)
        except NotFoundError:
            return None
        return None if found.device == device else found.device

    result: str | None = run_with_connection(work)
    return result


@sessions_app.command("list")
def list_(
    tenant: str | None = TENANT_OPTION,
    device: str | None = typer.Option(None, "--device", help="Only this device."),
    limit: int = typer.Option(50, "--limit", min=1, max=1000),
    as_json: bool = JSON_OPTION,
) -> None:
    """List the tenant's newest sessions."""
    from streams.registry import tenant_id
    from streams.views import sessions as queries

    owner = tenant_name(tenant)

    async def work(conn: Any) -> list[SessionSummary]:
        tid = await tenant_id(conn, owner)
        if tid is None:
            return []
        return await queries.list_sessions(conn, tid, device=device, limit=limit)

    rows = [operator_fields(s) for s in run_with_connection(work)]
    print_rows(rows, title=f"sessions of {owner}", as_json=as_json, columns=(
        "id", "device", "status", "query_ready", "active_run_id", "latest_run_status",
        "created_at"))


@sessions_app.command("show")
def show(
    session: str = typer.Argument(..., help="Session id."),
    tenant: str | None = TENANT_OPTION,
    laps: bool = typer.Option(
        False, "--laps", help="Also the active run's laps and its start/finish line."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show a session with its runs and artifacts (and, with --laps, every lap)."""
    from streams.objects import ObjectStore
    from streams.registry import require_tenant_id
    from streams.views import sessions as queries
    from streams.views.laps import session_laps

    owner, sid = tenant_name(tenant), parse_id(session)

    async def work(conn: Any) -> dict[str, Any]:
        tid = await require_tenant_id(conn, owner)
        session = await queries.get_session(conn, tid, sid)
        found = operator_fields(session)
        if session.active_run_id:
            run = operator_fields(await queries.get_run(conn, tid, session.active_run_id))
            found["active_run"] = {k: run[k] for k in (
                "status", "features_available", "feature_reasons", "summary")}
        if laps:
            store = ObjectStore(load_settings().objects())
            found["laps"] = (await session_laps(conn, store, tid, sid)).model_dump()
        return found

    data = run_with_connection(work)
    if as_json:
        print_json(data)
        return
    head = {k: data[k] for k in ("id", "tenant", "device", "status", "query_ready",
                                 "active_run_id", "created_at")}
    print_record(head, title=f"session {sid}")
    print_rows(data["runs"], title="runs", columns=(
        "id", "status", "requested_by", "created_at", "completed_at", "failure_reason"))
    print_rows(data["artifacts"], title="artifacts", columns=(
        "filename", "bytes", "sha256", "status", "format_detected"))
    if "active_run" in data:
        flags = data["active_run"]["features_available"]
        reasons = data["active_run"]["feature_reasons"]
        print_rows([{"feature": f, "available": v, "reason": reasons.get(f)}
                    for f, v in sorted(flags.items())],
                   title="features of the active run",
                   columns=("feature", "available", "reason"))
    if laps:
        _print_laps(data["laps"])


@sessions_app.command("lap")
def lap_cmd(
    session: str = typer.Argument(..., help="Session id."),
    lap: int = typer.Argument(..., min=1, help="Lap number."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One lap against the reference lap: corners (braking point, apex and exit speed, time
    gained or lost), mini-sectors, and the delta at the end (--json: the delta channel)."""
    from streams.objects import ObjectStore
    from streams.registry import require_tenant_id
    from streams.views.lap_analysis import lap_analysis

    owner, sid = tenant_name(tenant), parse_id(session)

    async def work(conn: Any) -> dict[str, Any]:
        tid = await require_tenant_id(conn, owner)
        store = ObjectStore(load_settings().objects())
        return (await lap_analysis(conn, store, tid, sid, lap)).model_dump(mode="json")

    data = run_with_connection(work)
    if as_json:
        print_json(data)
        return
    head = {"lap": data["lap"], "lap time s": f"{data['lap_time_s']:.3f}"}
    if data["reference_lap"] is not None:
        head["reference lap"] = data["reference_lap"]
        head["reference time s"] = f"{data['reference_lap_time_s']:.3f}"
        head["delta at the line s"] = f"{data['delta'][-1]['delta_s']:+.3f}"
    print_record(head, title=f"lap {lap} against the reference lap")
    if data["reason"]:
        console.print(f"no delta or corners ({data['reason']})")
    if data["corners"]:
        print_rows([{
            "corner": c["corner"], "dir": c["direction"] or "",
            "brake m": f"{c['braking_m']:.0f}", "entry km/h": f"{c['entry_speed_mps'] * 3.6:.1f}",
            "apex km/h": f"{c['apex_speed_mps'] * 3.6:.1f}",
            "exit km/h": f"{c['exit_speed_mps'] * 3.6:.1f}",
            "vs ref s": f"{c['time_delta_s']:+.3f}"} for c in data["corners"]],
            title="corners (vs ref: + lost, - gained)", columns=(
                "corner", "dir", "brake m", "entry km/h", "apex km/h", "exit km/h", "vs ref s"))
    if data["mini_sectors"]:
        print_rows([{"mini": m["sector"], "from m": f"{m['start_m']:.0f}",
                     "time s": f"{m['time_s']:.3f}{'*' if m['is_best'] else ''}",
                     "Δ best s": f"{m['delta_to_best_s']:+.3f}"
                     if m["delta_to_best_s"] is not None else ""}
                    for m in data["mini_sectors"]],
                   title="mini-sectors (* best)", columns=("mini", "from m", "time s", "Δ best s"))


EXPORT_FORMATS = ("csv", "gpx", "fit")
CSV_TABLES = ("laps", "sectors", "delta")


def _export_name(fmt: str | None, what: str | None, out: Path | None) -> str:
    """The export file (``laps.csv``...) the options ask for; ``--format`` may be left to the
    ``-o`` file's suffix. (The choices are spelled here so ``--help`` needs no pyarrow;
    tests/unit/stages/batch/export checks they are the table's.)"""
    if fmt is None and out is not None and out.suffix[1:].lower() in EXPORT_FORMATS:
        fmt = out.suffix[1:].lower()
    if fmt is None:
        raise UsageError(f"--format is required (one of {', '.join(EXPORT_FORMATS)}) unless "
                         "-o names a .csv, .gpx or .fit file")
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"--format must be one of {', '.join(EXPORT_FORMATS)}, not {fmt!r}")
    if fmt != "csv":
        if what not in (None, "session"):
            raise UsageError(f"--what is for CSV: a {fmt.upper()} file is the whole session "
                             "with its laps")
        return f"session.{fmt}"
    what = what or "laps"
    if what not in CSV_TABLES:
        raise UsageError(f"--what must be one of {', '.join(CSV_TABLES)}, not {what!r}")
    return f"{what}.csv"


@sessions_app.command("export")
def export_cmd(
    session: str = typer.Argument(..., help="Session id."),
    fmt: str | None = typer.Option(
        None, "--format", help="csv | gpx | fit (default: the -o file's suffix)."),
    what: str | None = typer.Option(
        None, "--what", help="For CSV: laps (default) | sectors | delta."),
    out: Path | None = typer.Option(
        None, "-o", "--out", help="File to write (default: standard output; FIT, being "
        "binary, only when that is not a terminal)."),
    tenant: str | None = TENANT_OPTION,
) -> None:
    """Export the active run's laps, sectors or delta channel as CSV, or the session with
    its laps as GPX or FIT (for video-overlay and analysis tools)."""
    from streams.objects import ObjectStore
    from streams.registry import tenant_id
    from streams.views.export import Export, session_export

    name = _export_name(fmt, what, out)
    owner, sid = tenant_name(tenant), parse_id(session)
    if out is None and name.endswith(".fit") and sys.stdout.isatty():
        raise UsageError("a FIT file is binary: give -o FILE, or redirect the output to a file")

    async def work(conn: Any) -> Export:
        tid = await tenant_id(conn, owner)
        if tid is None:
            raise NotFoundError(f"no session {sid}")
        store = ObjectStore(load_settings().objects())
        return await session_export(conn, store, tid, sid, name)

    found = run_with_connection(work)
    if out is None:
        sys.stdout.buffer.write(found.body)
        sys.stdout.buffer.flush()
        return
    out.write_bytes(found.body)
    err_console.print(f"wrote {out} ({len(found.body):,} bytes, {name} of session {sid})")


@sessions_app.command("reprocess")
def reprocess_cmd(
    session: str = typer.Argument(..., help="Session id."),
    tenant: str | None = TENANT_OPTION,
    config: str | None = typer.Option(None, "--config", help="New run config JSON/@file."),
    wait: bool = typer.Option(False, "--wait", help="Follow the new run until it ends."),
    timeout: float = typer.Option(600.0, "--timeout"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Start a new run with the current versions; the session switches only if it succeeds."""
    from streams.sessions.reprocess import reprocess

    owner, sid = tenant_name(tenant), parse_id(session)
    settings = load_settings()
    new_config = _config(config) if config else None

    async def start(conn: Any) -> EnqueuedRun:
        return await reprocess(
            conn, tenant=owner, session_id=sid, config=new_config, requested_by="cli",
            namespace=settings.namespace, default_attempts=settings.retry.job_max_attempts,
        )  # fmt: skip

    enqueued = run_with_connection(start)
    if not as_json:
        console.print(f"reprocessing session {sid} as run {enqueued.run_id}")
    elif not wait:
        print_json({"session_id": str(sid), "run_id": str(enqueued.run_id)})
    if wait:
        _print_final(_follow(settings, as_json=as_json, timeout=timeout,
                             run_id=enqueued.run_id), as_json=as_json)


@sessions_app.command("rollback")
def rollback_cmd(
    session: str = typer.Argument(..., help="Session id."),
    to: str | None = typer.Option(None, "--to", help="Run to make active (default: the "
                                  "previous succeeded or partial run)."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Point the session back at an earlier good run (nothing is deleted), once every
    dataset of that run has been read back and matched its sha256."""
    from streams.objects import ObjectStore
    from streams.sessions.reprocess import rollback

    owner, sid = tenant_name(tenant), parse_id(session)
    target = parse_id(to) if to else None
    store = ObjectStore(load_settings().objects())
    moved = run_with_connection(lambda conn: rollback(
        conn, tenant=owner, session_id=sid, to_run=target, requested_by="cli", store=store))
    data = {"session_id": str(sid), "from_run": str(moved.from_run),
            "to_run": str(moved.to_run)}
    if as_json:
        print_json(data)
    else:
        console.print(f"session {sid}: active run {moved.from_run} -> {moved.to_run}")


@sessions_app.command("synth")
def synth(
    out: Path = typer.Option(..., "--out", help="File to write (.gz: gzip-compressed)."),
    laps: int = typer.Option(5, "--laps", min=1),
    imu_hz: float = typer.Option(100.0, "--imu-hz"),
    gnss_hz: float = typer.Option(10.0, "--gnss-hz"),
    fmt: str = typer.Option("csv", "--format", help="nmea | gpx | csv | jsonl | fit"),
    seed: int = typer.Option(0, "--seed"),
    pit_lap: int | None = typer.Option(None, "--pit-lap", help="Pit stop after this lap."),
    open_road: bool = typer.Option(False, "--open-road", help="A road that never closes."),
    flat: bool = typer.Option(False, "--flat", help="No jumps."),
) -> None:
    """Write a synthetic session and its ground truth (OUT.truth.json)."""
    from stages.batch import formats
    from stages.batch.synth import synthesize

    if fmt not in formats.FORMATS:
        raise UsageError(f"--format must be one of {', '.join(formats.FORMATS)}")
    session = synthesize(laps=laps, imu_hz=imu_hz, gnss_hz=gnss_hz, seed=seed,
                         pit_lap=pit_lap, closed=not open_road, flat=flat)
    data = formats.write(fmt, {"gnss": session.gnss, "imu": session.imu},
                         compressed=out.suffix == ".gz")
    out.write_bytes(data)
    truth_path = out.with_name(out.name + ".truth.json")
    truth_path.write_bytes(orjson.dumps(session.truth.truth_json(),
                                        option=orjson.OPT_INDENT_2, default=str))
    streams = "GNSS only" if fmt == "nmea" else "GNSS at 1 Hz" if fmt == "fit" else "GNSS + IMU"
    console.print(f"wrote {out} ({len(data):,} bytes, {fmt}, {streams}, "
                  f"{session.truth.duration_s:.0f} s, {len(session.truth.laps)} laps) "
                  f"and {truth_path.name}")
