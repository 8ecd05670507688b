"""Retention's sweep of job outputs that no dataset row records: the backstop of a cancel.

A job's attempt promotes its output directory (``datasets/<run>/<job>-<key[:20]>``) before the
engine records it. When the job then ends without success, the worker that let go of the
attempt removes that directory (``streams.jobs.unrecorded``); this tier finds what it could
not: a worker killed between the promotion and the refusal, a job cancelled later while it
waited for its retry, a stage process that promoted in the instant after it was stopped, or a
removal that failed. Without it such a folder stayed for good under a cancelled or failed run:
no dataset row, never active, and the superseded-runs tier never reaches a run of a session
that has no active run (issue 27).

``unrecorded_outputs``
    A directory ``datasets/<run>/<name>-<key>`` of an ended run (``completed_at`` set, no open
    job) whose job ``<name>`` started and ended without success (``cancelled`` or ``failed``),
    and that none of the run's ``derived_datasets`` rows points into, once the later of the
    run's end and the directory's last write is ``retention.leftovers_s`` old. Only such a job
    can have unrecorded outputs: a succeeded job records its directory, a job that never
    started wrote nothing; and such a job is never completed again, a retried run writes under
    its own id and resumes only recorded datasets, so nothing can come to point at it.

Only runs whose directory exists are looked at (one listing of ``datasets/``, which
``streams.retention.batch`` makes too), and only those with such a job (one statement); each
of those costs one more listing. Planning (:func:`unrecorded_plan`) is pure.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from streams.adapters.postgres import Conn
from streams.config import RetentionSettings, Settings
from streams.errors import TransientError
from streams.objects import ObjectStore
from streams.retention.plan import DROP, KEEP, PlanItem

__all__ = ["TIER", "Unrecorded", "execute", "inventory", "plan_items", "unrecorded_plan"]

TIER: Final = "unrecorded_outputs"

# Of the runs $1 (those with a directory), the ended ones with a job that started and then
# ended without success: those jobs' names, and the URLs of every dataset the run records.
# derived_datasets is read through uq_derived_datasets_run_name (run_id first).
ENDED_RUNS_WITH_UNSUCCESSFUL_JOBS: Final = """
SELECT r.id, r.completed_at,
       array_agg(j.name) AS jobs,
       coalesce((SELECT array_agg(d.storage_url) FROM derived_datasets d WHERE d.run_id = r.id),
                '{}') AS recorded
FROM processing_runs r
JOIN jobs j ON j.run_id = r.id
WHERE r.id = ANY($1::uuid[]) AND r.completed_at IS NOT NULL AND r.jobs_open = 0
  AND j.state IN ('cancelled', 'failed') AND j.attempt_count > 0
GROUP BY r.id
"""

# Whether any dataset row, of any run, lies in a directory: a retry's rows point into the run
# it resumed (streams.sessions.resume), so a directory is recorded if anyone records it.
POINTED_INTO: Final = """
SELECT EXISTS (SELECT 1 FROM derived_datasets
               WHERE left(storage_url, length($1::text) + 1) = $1::text || '/')
"""

_OUTPUT_DIR: Final = re.compile(r"^(?P<job>.+)-(?P<key>[0-9a-f]{20})$")  # datasets.output_prefix


@dataclass(frozen=True, kw_only=True, slots=True)
class Unrecorded:
    """An output directory nothing records, of a job that ended without success."""

    key: str
    ended_at: datetime
    """When its run ended."""
    written_at: datetime | None
    bytes: int = 0


def unrecorded_plan(
    found: Sequence[Unrecorded], settings: RetentionSettings, now: datetime
) -> list[PlanItem]:
    """One item per directory: ``drop`` once it and its run's end are ``leftovers_s`` old."""
    grace = timedelta(seconds=settings.leftovers_s)
    items = []
    for d in found:
        expires = max(d.ended_at, d.written_at or d.ended_at) + grace
        items.append(
            PlanItem(tier=TIER, target=d.key, expires_at=expires,
                     action=DROP if expires <= now else KEEP, bytes=d.bytes)
        )  # fmt: skip
    return items


async def inventory(conn: Conn, store: ObjectStore) -> list[Unrecorded]:
    """Every unrecorded output directory of an ended run (see the module docstring)."""
    runs: dict[uuid.UUID, str] = {}
    for key in await asyncio.to_thread(store.children, "datasets"):
        try:
            runs[uuid.UUID(key.rsplit("/", 1)[1])] = key
        except ValueError:
            continue  # not a run's directory
    found = []
    for row in await conn.fetch(ENDED_RUNS_WITH_UNSUCCESSFUL_JOBS, list(runs)):
        jobs = set(row["jobs"])
        recorded = {url.rsplit("/", 1)[0] for url in row["recorded"]}
        for key in await asyncio.to_thread(store.children, runs[row["id"]]):
            match = _OUTPUT_DIR.match(key.rsplit("/", 1)[1])
            if match is None or match["job"] not in jobs or store.url(key) in recorded:
                continue
            if await conn.fetchval(POINTED_INTO, store.url(key)):
                continue  # another run's dataset lies in it: never unrecorded
            written_at, size = await asyncio.to_thread(store.footprint, key)
            found.append(Unrecorded(key=key, ended_at=row["completed_at"],
                                    written_at=written_at, bytes=size))  # fmt: skip
    return found


async def plan_items(conn: Conn, settings: Settings, now: datetime) -> list[PlanItem]:
    """This tier's items as of ``now``; an unreachable object store leaves one ``keep`` item
    saying so (the rest of the plan goes on)."""
    try:
        found = await inventory(conn, ObjectStore(settings.objects()))
    except TransientError as exc:
        return [PlanItem(tier=TIER, target=f"(object store not read: {exc.code})",
                         expires_at=None, action=KEEP, bytes=0)]  # fmt: skip
    return unrecorded_plan(found, settings.retention, now)


async def execute(
    settings: Settings, items: Sequence[PlanItem]
) -> tuple[list[PlanItem], list[tuple[str, str]]]:
    """Remove this tier's ``drop`` items; returns (done, skipped)."""
    mine = [i for i in items if i.tier == TIER and i.action == DROP]
    if not mine:
        return [], []
    done: list[PlanItem] = []
    skipped: list[tuple[str, str]] = []
    try:
        store = ObjectStore(settings.objects())
    except TransientError as exc:
        return [], [(i.target, f"object store: {exc.code}") for i in mine]
    for item in mine:
        try:
            await asyncio.to_thread(store.discard_unrecorded_outputs, item.target)
        except TransientError as exc:
            skipped.append((item.target, f"{exc.code}: {exc}"))
            continue
        done.append(item)
    return done, skipped
