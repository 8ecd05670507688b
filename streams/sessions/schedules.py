"""Scheduled backfills (spec 003's "time-based (cron)" trigger).

A schedule is a backfill with a cron expression: ``tideway runs schedule add nightly --cron
'0 3 * * *' [--device D] [--uploaded-within 7d]`` stores it (``backfill_schedules``, migration
0032), and every worker looks for due schedules every ``schedules.poll_s``:

- a due schedule's row is taken with ``FOR UPDATE SKIP LOCKED``, so exactly one worker runs each
  tick, and the backfill runs in that transaction: a worker that dies mid-tick rolls it back and
  the next one runs it;
- the backfill is :func:`streams.sessions.reprocess.backfill`, so a tick starts one run per
  session not yet at the current versions and config - "once per version", as a backfill by
  hand - and a tick after nothing changed starts nothing;
- the next time comes from the cron expression (UTC) and *now*: ticks missed while no worker ran
  are run once, not once each; the tick's outcome (sessions per action) or its error is kept on
  the row, which ``runs schedule list``, ``runs list``, the API and the console show.

Cron expressions are croniter's (five fields; ``@daily`` and friends too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from croniter import croniter

from schemas.api import BackfillSchedule as Schedule
from streams.adapters import postgres
from streams.adapters.errors import PG_FAILURES
from streams.config import Settings
from streams.errors import NotFoundError, UsageError
from streams.sessions.reprocess import BACKFILL_PRIORITY, BackfillScope, backfill

__all__ = ["Schedule", "Tick", "add_schedule", "list_schedules", "next_time",
           "remove_schedule", "run_due", "run_schedules"]

log = logging.getLogger(__name__)

_COLUMNS = """
s.id, t.name AS tenant, s.name, s.cron, s.device, s.uploaded_within_s, s.priority, s.enabled,
s.created_by, s.created_at, s.next_run_at, s.last_run_at, s.last_outcome, s.last_error
"""

_UPSERT = f"""
WITH saved AS (
    INSERT INTO backfill_schedules AS s (tenant_id, name, cron, device, uploaded_within_s,
                                         priority, created_by, next_run_at)
    SELECT t.id, $2, $3, $4, $5, $6, $7, $8 FROM tenants t WHERE t.name = $1
    ON CONFLICT (tenant_id, name) DO UPDATE
    SET cron = EXCLUDED.cron, device = EXCLUDED.device,
        uploaded_within_s = EXCLUDED.uploaded_within_s, priority = EXCLUDED.priority,
        enabled = true, next_run_at = EXCLUDED.next_run_at
    RETURNING s.*
)
SELECT {_COLUMNS} FROM saved s JOIN tenants t ON t.id = s.tenant_id
"""

_LIST = f"""
SELECT {_COLUMNS} FROM backfill_schedules s JOIN tenants t ON t.id = s.tenant_id
WHERE ($1::text IS NULL OR t.name = $1)
ORDER BY t.name, s.name
"""

_DELETE = """
DELETE FROM backfill_schedules s USING tenants t
WHERE t.id = s.tenant_id AND t.name = $1 AND s.name = $2
RETURNING s.id
"""

_DUE = f"""
SELECT {_COLUMNS} FROM backfill_schedules s JOIN tenants t ON t.id = s.tenant_id
WHERE s.enabled AND s.next_run_at <= $1
ORDER BY s.next_run_at
LIMIT 1
FOR UPDATE OF s SKIP LOCKED
"""

_DONE = """
UPDATE backfill_schedules
SET last_run_at = $2, next_run_at = $3, last_outcome = $4::text::jsonb, last_error = $5
WHERE id = $1
"""


def _schedule(row: Any) -> Schedule:
    data = dict(row)
    if isinstance(data["last_outcome"], str | bytes):  # a connection without the json codec
        data["last_outcome"] = orjson.loads(data["last_outcome"])
    return Schedule.model_validate(data)


@dataclass(frozen=True, kw_only=True)
class Tick:
    """What one due schedule's tick did."""

    schedule: str
    tenant: str
    outcome: dict[str, int] | None
    error: str | None
    next_run_at: datetime


def next_time(cron: str, after: datetime) -> datetime:
    """The first time strictly after ``after`` that ``cron`` names (UTC)."""
    if not croniter.is_valid(cron):
        raise UsageError(f"not a cron expression: {cron!r} (five fields, e.g. '0 3 * * *', "
                         "or @hourly, @daily, @weekly)")
    found: datetime = croniter(cron, after.astimezone(UTC)).get_next(datetime)
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)


async def add_schedule(conn: Any, *, tenant: str, name: str, cron: str, device: str | None = None,
                       uploaded_within_s: float | None = None, priority: int = BACKFILL_PRIORITY,
                       created_by: str = "operator", now: datetime | None = None) -> Schedule:
    """Store (or replace) the tenant's schedule ``name``; its first tick is ``cron``'s next."""
    if uploaded_within_s is not None and uploaded_within_s <= 0:
        raise UsageError("--uploaded-within must be positive")
    first = next_time(cron, now or datetime.now(UTC))
    row = await conn.fetchrow(_UPSERT, tenant, name, cron, device, uploaded_within_s, priority,
                              created_by, first)
    if row is None:
        raise NotFoundError(f"no tenant {tenant!r}")
    return _schedule(row)


async def list_schedules(conn: Any, tenant: str | None = None) -> list[Schedule]:
    """The schedules of ``tenant`` (``None``: every tenant's), by tenant and name."""
    return [_schedule(r) for r in await conn.fetch(_LIST, tenant)]


async def remove_schedule(conn: Any, tenant: str, name: str) -> None:
    if await conn.fetchval(_DELETE, tenant, name) is None:
        raise NotFoundError(f"tenant {tenant!r} has no schedule {name!r}")


async def run_due(conn: Any, settings: Settings, *, now: datetime | None = None) -> list[Tick]:
    """Run every schedule due at ``now``, each once, each in its own transaction."""
    ticks: list[Tick] = []
    while True:
        at = now or datetime.now(UTC)
        async with conn.transaction():
            row = await conn.fetchrow(_DUE, at)
            if row is None:
                return ticks
            schedule = _schedule(row)
            try:
                following = next_time(schedule.cron, at)
            except UsageError:  # stored before a croniter that reads it differently
                following = at + timedelta(days=1)
            scope = BackfillScope(
                tenant=schedule.tenant, device=schedule.device, until=None, limit=None,
                since=None if schedule.uploaded_within_s is None
                else at - timedelta(seconds=schedule.uploaded_within_s))
            outcome: dict[str, int] | None = None
            error: str | None = None
            try:
                async with conn.transaction():  # a savepoint: a failed backfill starts nothing
                    items = await backfill(
                        conn, scope, priority=schedule.priority,
                        requested_by=f"schedule {schedule.name}", namespace=settings.namespace,
                        default_attempts=settings.retry.job_max_attempts)
                outcome = dict(Counter(i.action for i in items))
            except PG_FAILURES:
                raise  # Postgres itself: the tick is not spent, the next poll runs it
            except Exception as exc:  # recorded on the schedule; its next tick tries again
                error = f"{type(exc).__name__}: {exc}"
                log.warning("scheduled backfill %s of %s failed: %s", schedule.name,
                            schedule.tenant, error)
            await conn.execute(_DONE, schedule.id, at, following,
                               None if outcome is None else orjson.dumps(outcome).decode(),
                               error)
        if outcome is not None:
            log.info("scheduled backfill %s of %s: %s; next at %s", schedule.name,
                     schedule.tenant, outcome, following.isoformat())
        ticks.append(Tick(schedule=schedule.name, tenant=schedule.tenant, outcome=outcome,
                          error=error, next_run_at=following))


async def run_schedules(settings: Settings, stop: asyncio.Event) -> None:
    """Run due schedules every ``schedules.poll_s`` until ``stop`` (a worker's companion)."""
    poll = settings.schedules.poll_s
    while not stop.is_set():
        try:
            conn = await postgres.connect(settings.postgres(), limits=settings.postgres_timeouts)
            try:
                await run_due(conn, settings)
            finally:
                await conn.close()
        except Exception as exc:  # Postgres away or a bug: logged, the next poll tries again
            log.warning("scheduled backfills not run now: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), poll)
