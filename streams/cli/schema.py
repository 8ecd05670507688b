"""``tideway schema apply | list | show | test``: device schemas from YAML files.

``apply`` checks and stores a schema file as a new immutable version (identical content is a
no-op that says so); ``test`` runs one sample payload through validate → mutate → derive without
touching any service, printing what each stage produces, and exits 3 (``ExitCode.FAILED``) if
the envelope would not be processed.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from schemas.api import SchemaVersion, operator_fields
from schemas.device_schema import SchemaFile, SchemaFileError, load_schema_file
from schemas.error_codes import SCHEMA_TRIAL_FLAGGED
from stages.errors import StageError
from stages.ingest.dry_run import evaluate_sample
from stages.ingest.ingress import EnvelopeError, load_json
from stages.ingest.program import compile_schema
from stages.ingest.topic_program import TopicProgram
from streams import registry
from streams.cli.exit_codes import ExitCode
from streams.cli.options import (
    JSON_OPTION,
    TENANT_SETTING_OPTION,
    run_with_connection,
    tenant_name,
)
from streams.cli.output import console, err_console, print_json, print_record, print_rows
from streams.cli.telemetry import parse_time
from streams.config import load_settings
from streams.errors import NotFoundError, UsageError
from streams.views import device_schemas

if TYPE_CHECKING:
    from streams.ingest.schema_trial import TrialReport

_SHOW_KEYS = ("id", "tenant", "schema", "version", "content_hash", "created_at", "source_text",
              "spec", "versions", "devices", "topic_ids", "parameters")  # `show --json`, as ever

schema_app = typer.Typer(help="Device schemas: apply, list, show, test.", no_args_is_help=True)


def load_checked(file: Path) -> tuple[SchemaFile, dict[str, TopicProgram]]:
    """Load and compile a schema file, turning its errors into operator errors."""
    try:
        schema = load_schema_file(file)
        return schema, compile_schema(schema, filename=str(file))
    except (SchemaFileError, StageError) as exc:
        raise UsageError(exc.message, code=exc.code) from None


@schema_app.command("apply")
def apply(file: Path = typer.Argument(..., help="Schema file (YAML)."),
          check_last: int | None = typer.Option(
              None, "--check-last", min=1,
              help="First try the version on the newest N envelopes of the devices on this "
              "schema; refuse it if the trial is flagged."),
          as_json: bool = JSON_OPTION) -> None:
    """Store FILE as a new schema version (identical content is a no-op)."""
    schema, programs = load_checked(file)
    text = file.read_text(encoding="utf-8")
    if check_last is not None:
        _check_before_apply(schema, programs, check_last, as_json=as_json)
    result = run_with_connection(
        lambda conn: registry.apply_schema(conn, schema, source_text=text,
                                           filename=str(file)))
    if as_json:
        print_json({**asdict(result), "status": "created" if result.created else "unchanged"})
    elif result.created:
        topics = ", ".join(result.topics)
        console.print(f"applied {result.schema} v{result.version} for tenant {result.tenant} "
                      f"(sha256 {result.content_hash[:12]}), topics: {topics}")
    else:
        newest = ("" if result.latest_version == result.version
                  else f"; the newest version is v{result.latest_version}")
        console.print(f"unchanged: {result.schema} v{result.version} already has this "
                      f"content (sha256 {result.content_hash[:12]}); nothing written{newest}")


@schema_app.command("list")
def list_(tenant: str | None = TENANT_SETTING_OPTION,
          as_json: bool = JSON_OPTION) -> None:
    """List the tenant's schemas with their newest version."""
    name = tenant_name(tenant)
    found = run_with_connection(lambda conn: device_schemas.list_schemas(conn, name))
    print_rows([operator_fields(s) for s in found], title=f"schemas of {name}", as_json=as_json,
               columns=("name", "latest_version", "versions", "devices", "content_hash",
                        "updated_at"))


@schema_app.command("show")
def show(name: str = typer.Argument(..., help="Schema name."),
         version: int | None = typer.Option(None, "--version", help="Default: newest."),
         tenant: str | None = TENANT_SETTING_OPTION,
         source: bool = typer.Option(False, "--source", help="Print the applied file text."),
         as_json: bool = JSON_OPTION) -> None:
    """Show one version of a schema and its parameters."""
    owner = tenant_name(tenant)

    found: SchemaVersion = run_with_connection(
        lambda conn: device_schemas.show_schema(conn, owner, name, version))
    if as_json:
        data = {**operator_fields(found), "schema": found.name}
        print_json({key: data[key] for key in _SHOW_KEYS})
        return
    if source:
        console.print(found.source_text, markup=False, highlight=False)
        return
    print_record({"schema": found.name, "tenant": found.tenant, "version": found.version,
                  "versions": ", ".join(map(str, found.versions)),
                  "content_hash": found.content_hash, "created_at": found.created_at,
                  "devices": found.devices}, title=f"{found.name} v{found.version}")
    print_rows(found.parameters, title="parameters", columns=(
        "topic", "name", "type", "unit", "source", "required", "critical", "min_value",
        "max_value", "mutate", "derived"))


@schema_app.command("test")
def test(file: Path = typer.Argument(..., help="Schema file (YAML)."),
         payload: Path | None = typer.Option(None, "--payload", help="JSON envelope or values."),
         device: str | None = typer.Option(
             None, "--device", help="Try the schema on this device's recorded envelopes instead."),
         last: int | None = typer.Option(
             None, "--last", min=1, help="With --device: the newest N envelopes "
             "(default: the schemas.trial_last setting)."),
         since: str | None = typer.Option(
             None, "--since", help="With --device: only envelopes stored since (RFC 3339 or "
             "an age: 15m, 2h)."),
         topic: str | None = typer.Option(None, "--topic", help="Needed if several."),
         as_json: bool = JSON_OPTION) -> None:
    """Run one payload through validate, mutate and derive (no services needed), or (with
    --device) the device's recorded envelopes, beside what the current version recorded."""
    schema, programs = load_checked(file)
    if (payload is None) == (device is None):
        raise UsageError("give either --payload (one sample) or --device (recorded traffic)")
    if device is not None:
        tried = _trial(schema, programs, device=device, topic=topic, last=last,
                       since=parse_time(since) if since else None)
        _show_trial(tried, as_json=as_json)
        if tried.flagged:
            raise typer.Exit(ExitCode.FAILED)
        return
    if last is not None or since is not None:
        raise UsageError("--last and --since go with --device")
    assert payload is not None
    program = programs[_pick_topic(schema, topic)]
    report = evaluate_sample(program, _read_sample(payload))
    if as_json:
        print_json(report)
    else:
        _print_report(report)
    if report["outcome"] != "processed":
        raise typer.Exit(ExitCode.FAILED)


def _trial(schema: SchemaFile, programs: dict[str, TopicProgram], *, device: str | None,
           topic: str | None = None, last: int | None = None,
           since: datetime | None = None) -> TrialReport:
    from streams.ingest.schema_trial import try_on_traffic

    return asyncio.run(try_on_traffic(
        load_settings(), tenant=schema.tenant, schema=schema.name,
        content_hash=schema.content_hash(), programs=programs, device=device, topic=topic,
        last=last, since=since))


def _check_before_apply(schema: SchemaFile, programs: dict[str, TopicProgram], last: int,
                        *, as_json: bool) -> None:
    """``apply --check-last``: the trial on the schema's devices, refusing a flagged version."""
    try:
        report = _trial(schema, programs, device=None, last=last)
    except NotFoundError:
        err_console.print(f"--check-last: no device of {schema.tenant} is on schema "
                          f"{schema.name} yet; nothing to try the version on")
        return
    if not as_json:
        _show_trial(report, as_json=False)
    if report.flagged:
        raise UsageError(
            f"not applied: the version would refuse {report.refused} of the {report.tried} "
            f"newest envelopes ({report.refused_share:.1%}; the limit is "
            f"{report.max_refused_share:.1%}, setting schemas.trial_max_refused_share)",
            code=SCHEMA_TRIAL_FLAGGED)


def _show_trial(report: TrialReport, *, as_json: bool) -> None:
    data = report.as_dict()
    if as_json:
        print_json(data)
        return
    print_record({
        "schema": f"{report.schema} (sha256 {report.content_hash[:12]}, not stored)",
        "subjects": ", ".join(report.subjects), "envelopes tried": report.tried,
        "repeats of a message id": report.repeats,
        "recorded before (compared)": report.compared,
        "would change status": data["status_changed"],
        "would be refused": f"{report.refused} ({report.refused_share:.1%}; limit "
                            f"{report.max_refused_share:.1%})",
    }, title="schema trial on recorded traffic (nothing written)")
    if report.status_changes:
        print_rows([{"change": k, "envelopes": v} for k, v in data["status_changes"].items()],
                   columns=("change", "envelopes"), title="status changes")
    if report.reasons:
        print_rows([{"reason": k, "envelopes": v} for k, v in data["reasons"].items()],
                   columns=("reason", "envelopes"), title="why the version refuses them")
    if data["parameters"]:
        print_rows([{"parameter": k, **v} for k, v in data["parameters"].items()],
                   columns=("parameter", "changed", "appeared", "disappeared", "min", "median",
                            "max"), title="values that change (new - recorded)")
    changed = [e for e in report.envelopes if e["changed"]][:20]
    if changed:
        print_rows([{**e, "parameters": ", ".join(e["changed_parameters"]),
                     "new_reasons": ", ".join(e["new_reasons"])} for e in changed],
                   columns=("stream_seq", "device", "topic", "old_status", "new_status",
                            "new_reasons", "parameters"),
                   title=f"envelopes that change (first {len(changed)}; --json lists more)")
    if not report.tried:  # nothing to judge by: say so rather than "within the limit"
        console.print(f"[yellow]nothing tried[/]: no envelope on {', '.join(report.subjects)} "
                      "is retained in the stream (older ones expire after stream.max_age_s)")
        return
    verdict = ("[red]flagged[/]: it refuses more than the limit" if report.flagged
               else "[green]within the limit[/]")
    console.print(f"verdict: {verdict}")


def _pick_topic(schema: SchemaFile, topic: str | None) -> str:
    names = [t.name for t in schema.topics]
    if topic is None and len(names) == 1:
        return names[0]
    if topic in names:
        return topic
    raise UsageError(f"choose a topic with --topic ({', '.join(names)})")


def _read_sample(path: Path) -> Any:
    """An envelope file, or a file of an envelope's values, as the pipeline reads a body."""
    try:
        data = load_json(path.read_bytes())  # as the pipeline reads a body (huge numbers too)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except EnvelopeError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc.message}") from None
    return data


def _print_report(report: dict[str, Any]) -> None:
    ingress = report["ingress"]
    if ingress is not None and not ingress["ok"]:
        console.print(f"[red]envelope refused[/]: {escape(ingress['message'])} "
                      f"({ingress['code']}): ingest dead-letters it")
        console.print("outcome: [red]failed_ingress[/]")
        return
    checked = report["validate"]
    rows = [{"parameter": k, "value": v} for k, v in checked["extracted"].items()]
    print_rows(rows, columns=("parameter", "value"), title=f"validate: topic {report['topic']}")
    if checked["issues"]:
        print_rows(checked["issues"], columns=("parameter", "code", "critical", "message"),
                   title="validation issues")
    if report["mutate"] is not None:
        changes = [{"parameter": k, "before": b, "after": a}
                   for k, (b, a) in report["mutate"]["change_set"].items()]
        print_rows(changes, columns=("parameter", "before", "after"), title="mutate: changes")
    if report["derive"] is not None:
        derived = [{"parameter": k, "value": v} for k, v in report["derive"]["derived"].items()]
        print_rows(derived, columns=("parameter", "value"), title="derive")
    for stage in ("mutate", "derive"):
        error = (report[stage] or {}).get("error")
        if error:
            console.print(f"[red]{stage} failed[/]: {error['message']} ({error['code']})")
    colour = "green" if report["outcome"] == "processed" else "red"
    console.print(f"outcome: [{colour}]{report['outcome']}[/]")
