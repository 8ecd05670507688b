"""``tideway retention show | run [--dry-run]``: what is stored, when it expires, what goes.

``show`` prints the retention plan (:mod:`streams.retention.plan`): every partition of the
streaming tables and every dedupe generation, the batch half's superseded runs, deleted
artifacts and leftovers (:mod:`streams.retention.batch`) and the ClickHouse analytics partitions
(:mod:`streams.retention.ttl`), each with its size, when it expires and what a run would do with
it now. ``run`` does one maintenance round now (:mod:`streams.retention.maintain`:
the same round the consumers' maintenance leader runs every
``retention.maintenance_interval_s``); ``--dry-run`` prints what it would drop and delete.
A partition of a tier in ``retention.archive`` shows the object it is exported to before it
is dropped (``archive_to``; :mod:`streams.retention.archive`).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import typer

from streams.adapters import postgres
from streams.cli.options import JSON_OPTION
from streams.cli.output import console, print_json, print_rows
from streams.config import load_settings
from streams.errors import TransientError
from streams.retention import archive, maintain
from streams.retention.plan import PlanItem

retention_app = typer.Typer(
    help="Retention of the streaming tables, the batch half and ClickHouse: show, run.",
    no_args_is_help=True,
)
_COLUMNS = ["tier", "target", "expires_at", "action", "bytes", "rows", "archive_to"]


def _row(item: PlanItem) -> dict[str, Any]:
    row = asdict(item)
    row["expires_at"] = (
        item.expires_at.isoformat(timespec="seconds") if item.expires_at else "never"
    )
    return row


@retention_app.command("show")
def show_command(as_json: bool = JSON_OPTION) -> None:
    """Every partition, dedupe generation, superseded run and leftover: size, expiry, and
    what a run would do now."""

    settings = load_settings()

    async def main() -> tuple[list[PlanItem], tuple[int, int]]:
        conn = await postgres.connect(settings.postgres_maintenance())
        try:
            items = await maintain.current_plan(conn, settings, datetime.now(UTC))
            return items, await archive.totals(conn)
        finally:
            await conn.close()

    items, (archives, archived_bytes) = asyncio.run(main())
    print_rows([_row(i) for i in items], columns=_COLUMNS, title="retention plan", as_json=as_json)
    if not as_json:
        total = sum(i.bytes for i in items)
        going = sum(i.bytes for i in items if i.action == "drop")
        console.print(f"{total:,} bytes stored; a run now drops {going:,} bytes")
        archiving = sum(1 for i in items if i.archive_to and i.action == "drop")
        expired = sum(1 for i in items if i.tier == archive.ARCHIVES and i.action == "drop")
        keep = settings.retention.archives_s
        kept = (f"kept {keep / 86400:g} days" if keep is not None
                else "kept until removed outside Tideway")
        console.print(
            f"archive: {archives:,} partitions in the object store ({archived_bytes:,} bytes), "
            f"{kept}; a run now archives {archiving:,} before dropping them and removes "
            f"{expired:,} expired"
        )


@retention_app.command("run")
def run_command(
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; change nothing."),
    as_json: bool = JSON_OPTION,
) -> None:
    """One maintenance round now: create partitions ahead, start a dedupe generation if one
    is due, drop and delete what expired."""

    async def main() -> maintain.Round:
        settings = load_settings()
        pool = await postgres.create_pool(settings.postgres_maintenance(),
                                           postgres.streaming_pool(1))
        try:
            done = await maintain.maintain_once(pool, settings, dry_run=dry_run)
        finally:
            await pool.close()
        if done is None:
            raise TransientError("another process is running a maintenance round; try again")
        return done

    done = asyncio.run(main())
    if as_json:
        print_json(
            {
                "dry_run": dry_run,
                "created": done.created,
                "generation_started": done.generation,
                "done": [_row(i) for i in done.done],
                "skipped": [{"target": t, "why": w} for t, w in done.skipped],
            }
        )
        return
    if done.created:
        console.print(f"created: {', '.join(done.created)}")
    if done.generation:
        console.print(f"started dedupe generation {done.generation}")
    print_rows(
        [_row(i) for i in done.done],
        columns=_COLUMNS,
        title="would drop / delete" if dry_run else "dropped / deleted",
    )
    for target, why in done.skipped:
        console.print(f"skipped {target}: {why} (the next round tries again)")
