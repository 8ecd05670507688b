"""The streaming half's commands: ``streams init``, ``simulate``, ``dlq``, ``replay`` and
``messages``. Every list/show command takes ``--json``. The consumer process itself
(``tideway ingest``) is with the other process commands in :mod:`streams.cli.process_commands`."""

from __future__ import annotations

import asyncio
import getpass
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import typer

from schemas.api import operator_fields
from streams.cli.exit_codes import ExitCode
from streams.cli.options import JSON_OPTION, ONLY_TENANT_OPTION, TENANT_OPTION, age_seconds
from streams.cli.output import console, err_console, print_json, print_record, print_rows
from streams.config import load_settings
from streams.errors import UsageError


def parse_time(value: str) -> datetime:
    """RFC 3339 (``2026-05-01T12:00:00Z``) or a relative age (``90s``, ``15m``, ``2h``, ``1d``)."""
    age = age_seconds(value)
    if age is not None:
        return datetime.now(UTC) - timedelta(seconds=age)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"not a time: {value!r} (RFC 3339 or an age like 15m)") from None
    if parsed.tzinfo is None:
        raise UsageError(f"{value!r} needs a UTC offset (Z or +hh:mm)")
    return parsed


streams_app = typer.Typer(help="NATS JetStream resources.", no_args_is_help=True)
dlq_app = typer.Typer(help="Dead-lettered envelopes: list, show, redrive, resolve.",
                      no_args_is_help=True)
messages_app = typer.Typer(help="Explain recorded envelopes.", no_args_is_help=True)

# `dlq show`'s keys, as ever: the stored dead letter's columns, then its envelope's
_DLQ_SHOW_KEYS = (
    "id", "ingestion_message_id", "tenant", "subject", "headers", "reason_code", "failures",
    "redrive_count", "state", "first_seen_at", "last_seen_at", "resolved_at", "resolution",
    "resolution_note", "resolved_by", "failed_stage", "schema_version_id", "dedupe_key",
    "status", "attempts", "stream_seq", "received_at", "source_deduplication_key", "envelope",
    "payload_text", "payload_bytes")


@streams_app.command("init")
def streams_init() -> None:
    """Create or update the TELEMETRY stream, the shared consumer, the DLQ stream and the
    analytics table (idempotent)."""
    from streams.ingest.provision import provision
    from streams.names import Names

    settings = load_settings()
    for warning in asyncio.run(provision(settings)):  # worth knowing, not worth failing
        err_console.print(f"[bold yellow]warning:[/] {warning}")
    names = Names(namespace=settings.namespace)
    console.print(f"streams ready: {names.telemetry_stream} ({names.telemetry_subjects}), "
                  f"consumer {names.ingest_durable}, {names.dead_letter_stream}")


def simulate_cmd(
    devices: int = typer.Option(25, "--devices", min=1, help="Simulated devices."),
    rate: float = typer.Option(500.0, "--rate", help="Envelopes per second, whole fleet."),
    duration: float = typer.Option(10.0, "--duration", help="Seconds to publish for."),
    duplicates: float = typer.Option(0.05, "--duplicates", help="Share re-sent (0: none)."),
    late: float = typer.Option(0.05, "--late",
                               help="Share sent after newer readings (0: none)."),
    invalid: float = typer.Option(0.02, "--invalid", help="Share failing validation (0: none)."),
    unknown_topic: float = typer.Option(0.01, "--unknown-topic",
                                        help="Share on a topic the schema lacks (0: none)."),
    tenant: str = TENANT_OPTION,
    seed: int = typer.Option(0, "--seed", help="Random seed (repeatable runs)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Register a simulated fleet and publish its envelopes."""
    from streams.ingest.simulate import ensure_fleet, simulate

    settings = load_settings()
    name = tenant or settings.default_tenant

    async def run() -> Any:
        await ensure_fleet(settings, tenant=name, devices=devices)
        last = [0.0]

        def progress(p: Any) -> None:
            if not as_json and p.elapsed_s - last[0] >= 1.0:
                last[0] = p.elapsed_s
                err_console.print(f"  {p.elapsed_s:5.1f}s  sent {p.sent:>8}  "
                                  f"{p.rate:8.0f}/s")

        return await simulate(settings, tenant=name, devices=devices, rate=rate,
                              duration=duration, duplicates=duplicates, late=late,
                              invalid=invalid, unknown_topic=unknown_topic, seed=seed,
                              on_progress=progress)

    report = asyncio.run(run())
    data = asdict(report)
    if as_json:
        print_json(data)
    else:
        expected = data.pop("expected")
        examples = data.pop("examples")
        print_record(data, title="simulation")
        print_rows([{"status": k, "expected": v} for k, v in expected.items()],
                   columns=["status", "expected"], title="what Tideway should record")
        print_rows([{"kind": k, "message": v} for k, v in examples.items()],
                   columns=["kind", "message"],
                   title="one envelope of each kind (tideway messages show MESSAGE)")


@dlq_app.command("list")
def dlq_list(
    state: str = typer.Option("open", "--state", help="open, resolved or all."),
    tenant: str = ONLY_TENANT_OPTION,
    limit: int = typer.Option(100, "--limit", min=1),
    as_json: bool = JSON_OPTION,
) -> None:
    """Dead letters, oldest first."""
    from streams.views.dead_letters import list_dead_letters

    if state not in ("open", "resolved", "all"):
        raise UsageError("--state must be open, resolved or all")
    found = _with_conn(lambda c: list_dead_letters(
        c, state=None if state == "all" else state, tenant=tenant, limit=limit))
    print_rows([operator_fields(d) for d in found],
               columns=["id", "ingestion_message_id", "tenant", "subject", "reason_code",
                        "state", "redrive_count", "first_seen_at", "resolution"],
               title="dead letters", as_json=as_json)


@dlq_app.command("show")
def dlq_show(dead_letter_id: int = typer.Argument(..., help="Dead letter id."),
             as_json: bool = JSON_OPTION) -> None:
    """One dead letter: the original envelope and every failure."""
    from streams.views.dead_letters import show_dead_letter

    data = operator_fields(_with_conn(lambda c: show_dead_letter(c, dead_letter_id)))
    print_record({k: data[k] for k in _DLQ_SHOW_KEYS}, title=f"dead letter {dead_letter_id}",
                 as_json=as_json)


@dlq_app.command("redrive")
def dlq_redrive(
    ids: list[int] = typer.Argument(
        None, help="Dead letter ids (default: every open one that can be redriven)."),
    page_size: int = typer.Option(500, "--page-size", min=1, max=10_000,
                                  help="Dead letters per page (one transaction each)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Re-run publish for dead-lettered envelopes and record the outcome.

    Exit 0: every redrivable dead letter completed (or nothing was open); exit 3: some
    still fail, or dead letters are open and none could be redriven (malformed envelopes:
    see `dlq resolve`)."""
    from streams.ingest.dlq import COMPLETED, FAILED, NOT_REDRIVABLE, RedrivePage, redrive

    def progress(page: RedrivePage) -> None:
        counts = Counter(r.outcome for r in page.results)
        err_console.print(f"  page {page.number}: {counts[COMPLETED]} completed, "
                          f"{counts[FAILED]} failed, {counts[NOT_REDRIVABLE]} not "
                          f"redrivable ({page.total} so far)")

    report = asyncio.run(redrive(load_settings(), ids=ids or None, page_size=page_size,
                                 on_page=None if as_json else progress))
    if as_json:
        print_json(operator_fields(report))
    else:
        # The completed ones are in the counts (and in --json); the table lists what still
        # needs a look, which stays readable when a redrive completes thousands.
        attention = [operator_fields(r) for r in report.results if r.outcome != COMPLETED]
        if attention:
            print_rows(attention,
                       columns=["dead_letter_id", "message_id", "outcome", "detail"],
                       title="redrive: not completed")
        summary = operator_fields(report)
        console.print(", ".join(f"{summary[k]} {k.replace('_', ' ')}" for k in (
            "completed", "failed", "not_redrivable", "not_open") if summary[k])
            or "nothing to redrive")
        if report.unreachable:
            left = ", ".join(f"{code} {n}" for code, n in report.unreachable.items())
            err_console.print(f"open dead letters no redrive can publish: {left}; close "
                              "them with `tideway dlq resolve --code CODE --note ...`")
    if report.nothing_done:
        raise typer.Exit(ExitCode.FAILED)


def _cli_user() -> str:
    """Who resolves from the command line, as the dead letter records it."""
    try:
        return f"cli {getpass.getuser()}"
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        return "cli"


@dlq_app.command("resolve")
def dlq_resolve(
    ids: list[int] = typer.Argument(None, help="Dead letter ids."),
    code: str = typer.Option(None, "--code", help="Every open dead letter with this "
                             "reason code (e.g. ENVELOPE_UNPARSEABLE)."),
    tenant: str = typer.Option(None, "--tenant", help="Only this tenant (with --code)."),
    note: str = typer.Option(..., "--note", "--reason",
                             help="Why they are resolved (recorded)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Close dead letters that will not be redriven (malformed envelopes, say), with a
    note. Exit 3 if a named id is not an open dead letter."""
    from streams.ingest.dlq import resolve_dead_letters

    report = _with_conn(lambda c: resolve_dead_letters(
        c, note=note, ids=ids or None, code=code, tenant=tenant, by=_cli_user()))
    if as_json:
        print_json({"resolved": list(report.resolved),
                    "not_resolved": list(report.not_resolved)})
    else:
        print_rows(list(report.resolved),
                   columns=["id", "ingestion_message_id", "tenant", "reason_code"],
                   title=f"resolved {len(report.resolved)}")
        if report.not_resolved:
            err_console.print("not open dead letters: "
                              + " ".join(str(i) for i in report.not_resolved))
    if report.not_resolved:
        raise typer.Exit(ExitCode.FAILED)


def replay_cmd(
    since: str = typer.Option(..., "--since", help="RFC 3339 time or age (15m, 2h)."),
    until: str = typer.Option(None, "--until", help="RFC 3339 time or age."),
    subject: str = typer.Option(None, "--subject", help="Only this subject (wildcards ok)."),
    device: str | None = typer.Option(None, "--device", help="Only this device's envelopes."),
    tenant: str | None = typer.Option(
        None, "--tenant", help="Only this tenant's envelopes (with --device: its tenant; "
        "default: the default_tenant setting)."),
    reprocess: bool = typer.Option(
        False, "--reprocess", help="Re-derive recorded envelopes through the devices' current "
        "schema versions, correcting the values recorded before a fix."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report, write nothing."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Re-feed retained envelopes; processed ones change nothing, missing ones fill in (with
    --reprocess: recorded ones are re-derived and their values corrected)."""
    from streams.ingest.replay import replay

    settings = load_settings()
    if device is not None or tenant is not None:
        if subject is not None:
            raise UsageError("give --subject, or --device/--tenant, not both")
        subject = f"telemetry.{tenant or settings.default_tenant}.{device or '*'}.*"

    def progress(r: Any) -> None:
        if as_json:
            return
        done = r.reprocess.corrected if r.reprocess is not None else sum(r.recorded.values())
        verb = "would correct" if dry_run else "corrected"
        if r.reprocess is None:
            verb = "would record" if dry_run else "recorded"
        err_console.print(f"replay: {r.scanned} envelopes read (seq {r.first_seq}-"
                          f"{r.last_seq}), {verb} {done}")

    report = asyncio.run(replay(settings, since=parse_time(since),
                                until=parse_time(until) if until else None,
                                subject=subject, dry_run=dry_run, reprocess=reprocess,
                                on_batch=progress))
    data = report.as_dict()
    if as_json:
        print_json(data)
        return
    title = ("reprocess" if reprocess else "replay") + (" (dry run)" if dry_run else "")
    if report.reprocess is not None:
        data.pop("status_changes")
        data.pop("parameters")
        found = report.reprocess.as_dict()
        changes: dict[str, int] = found["status_changes"]
        parameters: dict[str, dict[str, Any]] = found["parameters"]
        print_record({**data, **{f"status would change: {k}": v for k, v in changes.items()}},
                     title=title)
        if parameters:
            print_rows([{"parameter": k, **v} for k, v in parameters.items()],
                       columns=("parameter", "changed", "appeared", "disappeared", "min",
                                "median", "max"), title="values corrected (new - recorded)")
        return
    recorded = dict(report.recorded)
    data.pop("recorded")
    print_record({**data, **{f"recorded.{k}": v for k, v in recorded.items()}}, title=title)


@messages_app.command("show")
def messages_show(ident: str = typer.Argument(..., help="Message id or dedupe key."),
                  as_json: bool = JSON_OPTION) -> None:
    """Status, stage logs, telemetry row and publication of one envelope."""
    from streams.ingest.messages import explain

    data = asyncio.run(explain(load_settings(), ident))
    if as_json:
        print_json(data)
        return
    print_record(data["message"], title=f"envelope {data['message']['id']}")
    print_rows(data["stages"], columns=["attempt", "stage", "status", "duration_us",
                                        "error_code", "error_message"], title="stages")
    for part in ("telemetry", "published", "dead_letter"):
        if data.get(part):
            print_record(data[part], title=part)
    for c in data.get("corrections") or ():  # what reprocesses replaced, oldest first
        print_record({"corrected_at": c["corrected_at"], "reprocess": c["reprocess_id"],
                      "version": f"v{c['previous_version']} → v{c['version']}",
                      "values before": c["previous_values"], "values after": c["values"]},
                     title="corrected by a reprocess")
    if data.get("archive"):  # rows retention dropped, read back from their archive
        print_record({t: ", ".join(keys) for t, keys in data["archive"].items()},
                     title="from the archive (retention dropped these rows)")
    if data["duplicates"]:
        print_rows(data["duplicates"], columns=["id", "stream_seq", "received_at"],
                   title="duplicates of this envelope")


def _with_conn(work: Any) -> Any:
    from streams.adapters import postgres

    async def main() -> Any:
        pool = await postgres.create_pool(load_settings().postgres(), postgres.streaming_pool(1))
        try:
            async with pool.acquire() as conn:
                return await work(conn)
        finally:
            await pool.close()

    return asyncio.run(main())
