"""Retention of the batch half: superseded runs' outputs, deleted artifacts, leftovers.

Four tiers join the retention plan (:mod:`streams.retention.plan`; ``tideway retention show``
lists them, ``run`` and the maintenance leader carry them out):

``superseded_runs``
    A run that has ended and is not its session's active run, once it has been so for
    ``retention.superseded_runs_s``: its datasets (``datasets/<run>/`` in the object store), its
    rows in the ClickHouse session tables (``session_*``, keyed by ``run_id``) and its
    ``derived_datasets`` rows go; the run row, its jobs and attempts and its summary stay for
    audit, with ``outputs_removed_at`` set. It is counted from the later of the run's end and
    the session's last change (``sessions.updated_at``, which every pointer move sets), so a
    rollback away from a run restarts its grace. The active run is never a candidate, nor is a
    run whose jobs are still open, nor any run of a session that has no active run (every run
    failed: their partial outputs are what there is to debug with). Removal marks the run first,
    holding the session row (``rollback`` holds it too and refuses a marked run), so a run can
    not become active while, or after, its outputs go; a removal that stops half-way is finished
    by the next round (the marked run still has ``derived_datasets`` rows).
``deleted_artifacts``
    Artifacts whose row says ``deleted`` (the status the schema allows; nothing in Tideway
    sets it today: sessions cannot be deleted, an operator marks artifacts by hand) and whose
    object is still stored; not while a run that reads it is open.
``orphan_datasets``
    ``datasets/<run>/`` directories whose run row no longer exists (rows removed by hand),
    older than ``retention.leftovers_s``.
``tmp_leftovers``
    Entries under ``tmp/`` (a write that was never promoted: an attempt or upload that died)
    last written more than ``retention.leftovers_s`` ago *and* before the oldest running job
    attempt started: a live attempt only writes temps after it was claimed, so a temp older
    than every live attempt is nobody's.

Pure planning (:func:`batch_plan`) is separated from the inventory and the execution.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.adapters.postgres import Conn
from streams.clickhouse import ClickHouse, ident
from streams.config import RetentionSettings, Settings
from streams.errors import ConfigError, PermanentError, TransientError
from streams.names import Names
from streams.objects import ObjectStore
from streams.retention import ttl
from streams.retention.plan import DROP, KEEP, PlanItem

SUPERSEDED_RUNS = "superseded_runs"
DELETED_ARTIFACTS = "deleted_artifacts"
ORPHAN_DATASETS = "orphan_datasets"
TMP_LEFTOVERS = "tmp_leftovers"
TIERS = (SUPERSEDED_RUNS, DELETED_ARTIFACTS, ORPHAN_DATASETS, TMP_LEFTOVERS)

# -- statements -------------------------------------------------------------------------------

# Runs that ended and are not their session's active run (of sessions that have one), not yet
# removed - or marked but not finished (their derived_datasets rows are deleted last).
SUPERSEDED = """
SELECT r.id, greatest(r.completed_at, s.updated_at) AS superseded_at, r.outputs_removed_at,
       coalesce(d.bytes, 0)::bigint AS bytes, coalesce(d.n, 0) AS datasets
FROM processing_runs r
JOIN sessions s ON s.id = r.session_id
LEFT JOIN LATERAL (SELECT sum(bytes) AS bytes, count(*) AS n FROM derived_datasets
                   WHERE run_id = r.id) d ON true
WHERE s.active_run_id IS NOT NULL AND s.active_run_id <> r.id
  AND r.completed_at IS NOT NULL AND r.jobs_open = 0
  AND (r.outputs_removed_at IS NULL OR d.n > 0)
ORDER BY superseded_at, r.id
"""

# Marking: the session row is held (as rollback holds it), so the check that the run is not
# active and the mark are one decision.
LOCK_SESSION_OF_RUN = """
SELECT s.active_run_id FROM sessions s
WHERE s.id = (SELECT session_id FROM processing_runs WHERE id = $1)
FOR UPDATE
"""
MARK_REMOVED = """
UPDATE processing_runs SET outputs_removed_at = coalesce(outputs_removed_at, $2)
WHERE id = $1
"""
FORGET_DATASETS = "DELETE FROM derived_datasets WHERE run_id = $1"

# Artifacts marked deleted, and whether a run still open reads them.
DELETED = """
SELECT a.id, a.storage_url, a.bytes,
       EXISTS (SELECT 1 FROM run_artifacts ra JOIN processing_runs r ON r.id = ra.run_id
               WHERE ra.artifact_id = a.id AND r.completed_at IS NULL) AS in_use
FROM artifacts a WHERE a.status = 'deleted'
ORDER BY a.id
"""

KNOWN_RUNS = "SELECT id FROM processing_runs WHERE id = ANY($1::uuid[])"

# When the oldest job attempt still running was claimed (NULL: none is).
OLDEST_RUNNING = """
SELECT min(locked_at) FROM jobs WHERE state IN ('running', 'cancel_requested')
"""

# The ClickHouse session tables (streams.sessions.materialise): every one keys rows by run.
SESSION_TABLES = """
SELECT table FROM system.columns
WHERE database = {db:String} AND startsWith(table, 'session_') AND name = 'run_id'
ORDER BY table
"""


# -- the inventory, as values -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """A run that ended and is not its session's active run."""

    id: uuid.UUID
    superseded_at: datetime
    removing: bool
    """Retention marked it and did not finish (its outputs must go whatever the grace)."""
    bytes: int
    datasets: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Stored:
    """An object-store entry (file or directory): when it was last written, its size."""

    key: str
    written_at: datetime | None
    bytes: int = 0
    in_use: bool = False
    """An open run reads it (deleted artifacts)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Inventory:
    """What the batch half holds that retention looks at (:func:`inventory`)."""

    runs: tuple[Run, ...] = ()
    deleted_artifacts: tuple[Stored, ...] = ()
    orphan_datasets: tuple[Stored, ...] = ()
    tmp: tuple[Stored, ...] = ()
    oldest_running: datetime | None = None
    """When the oldest running job attempt was claimed."""


def batch_plan(inv: Inventory, settings: RetentionSettings, now: datetime) -> list[PlanItem]:
    """The batch half's plan items (module docstring)."""
    grace = timedelta(seconds=settings.superseded_runs_s)
    leftover = timedelta(seconds=settings.leftovers_s)
    items = []
    for run in inv.runs:
        expires = run.superseded_at + grace
        action = DROP if run.removing or expires <= now else KEEP
        items.append(
            PlanItem(
                tier=SUPERSEDED_RUNS,
                target=f"run {run.id}",
                expires_at=expires,
                action=action,
                bytes=run.bytes,
                rows=None,
            )
        )
    for art in inv.deleted_artifacts:
        items.append(
            PlanItem(
                tier=DELETED_ARTIFACTS,
                target=art.key,
                expires_at=None if art.in_use else now,
                action=KEEP if art.in_use else DROP,
                bytes=art.bytes,
            )
        )
    for orphan in inv.orphan_datasets:
        expires = (orphan.written_at or now) + leftover
        items.append(
            PlanItem(
                tier=ORPHAN_DATASETS,
                target=orphan.key,
                expires_at=expires,
                action=DROP if expires <= now else KEEP,
                bytes=orphan.bytes,
            )
        )
    for temp in inv.tmp:
        written = temp.written_at or now
        held = inv.oldest_running is not None and written >= inv.oldest_running
        expires = written + leftover
        items.append(
            PlanItem(
                tier=TMP_LEFTOVERS,
                target=temp.key,
                expires_at=None if held else expires,
                action=DROP if expires <= now and not held else KEEP,
                bytes=temp.bytes,
            )
        )
    return items


# -- I/O --------------------------------------------------------------------------------------


def _store(settings: Settings) -> ObjectStore:
    return ObjectStore(settings.objects())


def _clickhouse(settings: Settings) -> ClickHouse:
    return ClickHouse(settings.clickhouse(), settings.clickhouse_database)


async def inventory(conn: Conn, store: ObjectStore) -> Inventory:
    """What the batch half holds that retention looks at."""
    runs = tuple(
        Run(
            id=r["id"],
            superseded_at=r["superseded_at"],
            removing=r["outputs_removed_at"] is not None,
            bytes=r["bytes"],
            datasets=r["datasets"],
        )
        for r in await conn.fetch(SUPERSEDED)
    )
    deleted = []
    for r in await conn.fetch(DELETED):
        try:
            key = store.key(r["storage_url"])
        except PermanentError:
            continue  # stored under another root: not this store's to remove
        if await asyncio.to_thread(store.exists, key):
            deleted.append(Stored(key=key, written_at=None, bytes=r["bytes"], in_use=r["in_use"]))
    dirs = await asyncio.to_thread(store.children, "datasets")
    ids = {}
    for key in dirs:
        try:
            ids[key] = uuid.UUID(key.rsplit("/", 1)[1])
        except ValueError:
            continue  # not a run's directory: not ours to judge
    known = {r["id"] for r in await conn.fetch(KNOWN_RUNS, list(ids.values()))}
    orphans = [await _stored(store, key) for key, run in ids.items() if run not in known]
    temps = [await _stored(store, key) for key in await asyncio.to_thread(store.children, "tmp")]
    return Inventory(
        runs=runs,
        deleted_artifacts=tuple(deleted),
        orphan_datasets=tuple(orphans),
        tmp=tuple(temps),
        oldest_running=await conn.fetchval(OLDEST_RUNNING),
    )


async def _stored(store: ObjectStore, key: str) -> Stored:
    written_at, size = await asyncio.to_thread(store.footprint, key)
    return Stored(key=key, written_at=written_at, bytes=size)


async def plan_items(conn: Conn, settings: Settings, now: datetime) -> list[PlanItem]:
    """The batch half's items and the ClickHouse analytics partitions, as of ``now``.

    An object store or ClickHouse that cannot be reached (an embedded chDB another process
    holds, say) leaves its items out with one ``keep`` item saying so, rather than failing the
    whole plan: the streaming tables' maintenance must go on."""
    items: list[PlanItem] = []
    try:
        inv = await inventory(conn, _store(settings))
    except TransientError as exc:  # the object store (Postgres errors are the round's)
        items.append(_unavailable(TMP_LEFTOVERS, exc))
    else:
        items += batch_plan(inv, settings.retention, now)
    try:
        table = Names(namespace=settings.namespace).analytics_table
        items += await ttl.partition_items(_clickhouse(settings), table)
    except (TransientError, ConfigError) as exc:  # unreachable, held, or not configured
        items.append(_unavailable(ttl.CLICKHOUSE_TELEMETRY, exc))
    return items


def _unavailable(tier: str, exc: TransientError | ConfigError) -> PlanItem:
    what = "ClickHouse" if tier == ttl.CLICKHOUSE_TELEMETRY else "object store"
    return PlanItem(
        tier=tier, target=f"({what} not read: {exc.code})", expires_at=None, action=KEEP, bytes=0
    )


async def execute(
    conn: Conn, settings: Settings, items: Sequence[PlanItem], now: datetime
) -> tuple[list[PlanItem], list[tuple[str, str]]]:
    """Carry out the batch half's ``drop`` items; returns (done, skipped)."""
    mine = [i for i in items if i.tier in TIERS and i.action == DROP]
    if not mine:
        return [], []
    try:
        store = _store(settings)
    except TransientError as exc:
        return [], [(i.target, f"object store: {exc.code}") for i in mine]
    done: list[PlanItem] = []
    skipped: list[tuple[str, str]] = []
    runs = [i for i in mine if i.tier == SUPERSEDED_RUNS]
    tables: list[str] | None = None
    ch: ClickHouse | None = None
    if runs:
        try:
            ch = _clickhouse(settings)
            tables = [ident(r[0]) for r in await ch.query_rows(SESSION_TABLES, {"db": ch.database})]
        except (TransientError, ConfigError) as exc:
            skipped += [(i.target, f"ClickHouse: {exc.code}") for i in runs]
    for item in mine:
        try:
            if item.tier == SUPERSEDED_RUNS:
                if tables is None or ch is None:
                    continue
                run = uuid.UUID(item.target.removeprefix("run "))
                if not await _remove_run(conn, store, ch, tables, run, now):
                    skipped.append((item.target, "it is its session's active run again"))
                    continue
            else:
                await asyncio.to_thread(store.remove_expired, item.target)
        except TransientError as exc:
            skipped.append((item.target, f"{exc.code}: {exc}"))
            continue
        done.append(item)
    return done, skipped


async def _remove_run(
    conn: Conn,
    store: ObjectStore,
    ch: ClickHouse,
    tables: Sequence[str],
    run: uuid.UUID,
    now: datetime,
) -> bool:
    """Mark ``run`` (unless it is active again), then remove its ClickHouse rows, its datasets
    and its ``derived_datasets`` rows, in that order (a stop half-way is finished later)."""
    async with conn.transaction():
        active = await conn.fetchval(LOCK_SESSION_OF_RUN, run)
        if active == run:
            return False
        await conn.execute(MARK_REMOVED, run, now)
    for table in tables:
        await ch.command(
            f"DELETE FROM {ch.database}.{table} WHERE run_id = {{run:UUID}}", {"run": str(run)}
        )
    await asyncio.to_thread(store.remove_expired, f"datasets/{run}")
    await conn.execute(FORGET_DATASETS, run)
    return True
