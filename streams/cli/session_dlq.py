"""``tideway sessions dlq list | show | redrive``: notices intake dead-lettered.

The streaming dead letters have their own ``tideway dlq`` (:mod:`streams.cli.telemetry`); these
are session notices, kept in JetStream's ``SESSIONS_DLQ`` (read by
:mod:`streams.views.session_dead_letters`, redriven by :mod:`streams.sessions.dead_letters`).
The shapes are the same: ``--json`` on every command, ids from ``list``, and ``redrive`` exits 3
when a named id is not a dead letter.
"""

from __future__ import annotations

import asyncio
from typing import Any

import typer

from schemas.api import SessionDeadLetter, operator_fields
from streams.cli.exit_codes import ExitCode
from streams.cli.options import JSON_OPTION, ONLY_TENANT_OPTION
from streams.cli.output import console, err_console, print_json, print_record, print_rows
from streams.config import load_settings

# The keys `list --json` and `show` print, as ever, and their timestamps as text as ever: the
# stream's time as str() gives it, the notice's times as intake wrote them (ISO 8601).
_KEYS = ("id", "tenant", "device", "subject", "code", "message", "notice", "dead_lettered_at",
         "error_type", "retry_count", "deliveries", "first_seen_at", "last_seen_at",
         "stack_trace")


def _printable(dead: SessionDeadLetter) -> dict[str, Any]:
    data = operator_fields(dead)
    data["dead_lettered_at"] = None if dead.dead_lettered_at is None else str(
        dead.dead_lettered_at)
    for key in ("first_seen_at", "last_seen_at"):
        data[key] = None if data[key] is None else data[key].isoformat()
    return {key: data[key] for key in _KEYS}


session_dlq_app = typer.Typer(
    help="Dead-lettered session notices: list, show, redrive.", no_args_is_help=True
)


@session_dlq_app.command("list")
def list_(
    tenant: str | None = ONLY_TENANT_OPTION,
    after: int = typer.Option(0, "--after", min=0, help="Only ids above this one."),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000),
    as_json: bool = JSON_OPTION,
) -> None:
    """Dead-lettered notices, oldest first."""
    from streams.views.session_dead_letters import list_session_dead_letters

    found = asyncio.run(
        list_session_dead_letters(load_settings(), tenant=tenant, after=after, limit=limit)
    )
    print_rows(
        [_printable(d) for d in found],
        columns=["id", "tenant", "device", "code", "error_type", "retry_count",
                 "dead_lettered_at", "message"],
        title="session dead letters",
        as_json=as_json,
    )


@session_dlq_app.command("show")
def show(
    dead_letter_id: int = typer.Argument(..., help="Dead letter id (from list)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """One dead-lettered notice: why, and the notice itself."""
    from streams.views.session_dead_letters import show_session_dead_letter

    dead = asyncio.run(show_session_dead_letter(load_settings(), dead_letter_id))
    print_record(_printable(dead), title=f"session dead letter {dead_letter_id}", as_json=as_json)


@session_dlq_app.command("redrive")
def redrive(
    ids: list[int] = typer.Argument(None, help="Dead letter ids (default: all)."),
    tenant: str | None = ONLY_TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Publish dead-lettered notices again for intake (after fixing their cause), and
    remove them from the dead-letter stream. Exit 3 if a named id is not a dead letter."""
    from streams.sessions.dead_letters import NOT_FOUND, REDRIVEN, redrive_dead_notices

    results = asyncio.run(redrive_dead_notices(load_settings(), ids or None, tenant=tenant))
    missing = [r.id for r in results if r.outcome == NOT_FOUND]
    if as_json:
        print_json(
            {"redriven": [r.id for r in results if r.outcome == REDRIVEN], "not_found": missing}
        )
    else:
        done = sum(1 for r in results if r.outcome == REDRIVEN)
        console.print(f"{done} notice(s) redriven" if results else "nothing to redrive")
        if missing:
            err_console.print("not session dead letters: " + " ".join(map(str, missing)))
    if missing:
        raise typer.Exit(ExitCode.FAILED)
