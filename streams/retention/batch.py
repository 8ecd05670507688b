"""Retention of the batch half: superseded runs' outputs, deleted artifacts, leftovers.

Four tiers join the retention plan (:mod:`streams.retention.plan`; ``tideway retention show``
lists them, ``run`` and the maintenance leader carry them out):

``superseded_runs``
    A run that has ended and is not its session's active run, once it has been so for
    ``retention.superseded_runs_s``: its datasets (``datasets/<run>/`` in the object store), its
    rows in the ClickHouse session tables (``session_*``, keyed by ``session_id, run_id``) and its
    ``derived_datasets`` rows go; the run row, its jobs and attempts and its summary stay for
    audit, with ``outputs_removed_at`` set. It is counted from the later of the run's end and
    the session's last change (``sessions.updated_at``, which every pointer move sets), so a
    rollback away from a run restarts its grace. The active run is never a candidate, nor is a
    run whose jobs are still open, nor any run of a session that has no active run (every run
    failed: their partial outputs are what there is to debug with), nor a run that an open run
    retries, directly or up its chain (it may still reuse its outputs, ``held``). Removal marks
    the run first, holding the session row (``rollback`` holds it too and refuses a marked run),
    so a run can not become active while, or after, its outputs go; a removal that stops
    half-way is finished by the next round (the marked run still has ``derived_datasets`` rows).
``deleted_artifacts``
    Artifacts whose row says ``deleted`` (the status the schema allows; nothing in Tideway
    sets it today: sessions cannot be deleted, an operator marks artifacts by hand) and whose
    object is still stored; not while a run that reads it is open.
``orphan_datasets``
    ``datasets/<run>/`` directories whose run row no longer exists (rows removed by hand), or
    whose run's outputs were removed but the directory was kept because a kept run pointed
    into it (below); older than ``retention.leftovers_s``, and never while a kept run points
    into it.
``tmp_leftovers``
    Entries under ``tmp/`` (a write that was never promoted: an attempt or upload that died)
    last written more than ``retention.leftovers_s`` ago *and* before the oldest running job
    attempt started: a live attempt only writes temps after it was claimed, so a temp older
    than every live attempt is nobody's.

Nothing a kept run points at is removed
---------------------------------------
A retried run reuses the verified outputs of the run it retries (``streams.sessions.resume``):
its ``derived_datasets`` rows point into *that* run's directory. So a directory is removed only
when no dataset row of a kept run (one whose outputs were not removed) lies in it. The unit is
the run's whole directory, not file by file: a retry reuses nearly everything the run it
retries computed (every job that succeeded and still verified), so splitting the directory
would free little, and keeping it whole keeps each job's output directory with its manifest,
as it was promoted. A superseded run whose directory is pointed into still loses its
ClickHouse rows and dataset rows and is marked (it can never be made active again); its
directory stays, listed under ``orphan_datasets`` as kept, and goes in the first round after
the last run pointing into it has been removed. Reuse stays within a retry chain, hence within
a session, so the rows looked at are those of the session's runs (an orphan directory's session
is unknown: there every dataset row is looked at, a scan made only while such a directory
exists).

No new pointer can appear behind retention's back: resume never reuses a marked run's outputs,
and a run is marked only while no open run retries it - checked holding the session row, which
creating a retry's run row waits for (its foreign key to the session takes a key-share lock), so
a retry is either seen by the check or created after the mark.

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

# A dataset of a kept run (outputs not removed) other than r lies in r's directory; $1 is the
# store's URL of datasets/ ('<root>/datasets/'). Only the runs of r's session are looked at: a
# run's datasets lie in its own directory or, reused, in that of a run it retries - of the same
# session (streams.sessions.resume). ix_processing_runs_session_id and uq_derived_datasets_run_name
# find them.
_POINTED_INTO = """EXISTS (
    SELECT 1 FROM processing_runs o JOIN derived_datasets k ON k.run_id = o.id
    WHERE o.session_id = r.session_id AND o.id <> r.id AND o.outputs_removed_at IS NULL
      AND starts_with(k.storage_url, $1 || r.id::text || '/'))"""

# Runs that ended and are not their session's active run (of sessions that have one), not yet
# removed - or marked but not finished (their derived_datasets rows are deleted last). ``held``:
# an open run retries it, directly or up its retry chain, and may still reuse its outputs.
# ``pointed``: a kept run points into its directory, which then stays (module docstring).
# ``bytes``: its own files (datasets it reused from another run's directory are not its own).
SUPERSEDED = f"""
WITH RECURSIVE held(id) AS (
    SELECT retry_of FROM processing_runs WHERE completed_at IS NULL AND retry_of IS NOT NULL
    UNION
    SELECT r.retry_of FROM processing_runs r JOIN held h ON r.id = h.id
    WHERE r.retry_of IS NOT NULL
)
SELECT r.id, greatest(r.completed_at, s.updated_at) AS superseded_at, r.outputs_removed_at,
       r.id IN (SELECT id FROM held) AS held, {_POINTED_INTO} AS pointed,
       coalesce(d.bytes, 0)::bigint AS bytes, coalesce(d.n, 0) AS datasets
FROM processing_runs r
JOIN sessions s ON s.id = r.session_id
LEFT JOIN LATERAL (
    SELECT sum(bytes) FILTER (WHERE starts_with(storage_url, $1 || r.id::text || '/')) AS bytes,
           count(*) AS n
    FROM derived_datasets WHERE run_id = r.id
) d ON true
WHERE s.active_run_id IS NOT NULL AND s.active_run_id <> r.id
  AND r.completed_at IS NOT NULL AND r.jobs_open = 0
  AND (r.outputs_removed_at IS NULL OR d.n > 0)
ORDER BY superseded_at, r.id
"""

# Marking: the session row is held (as rollback holds it, and as inserting a run of the session
# waits for it), so the checks that the run is neither active nor retried by an open run, and
# the mark, are one decision.
LOCK_SESSION_OF_RUN = """
SELECT s.id AS session_id, s.active_run_id, r.outputs_removed_at
FROM processing_runs r JOIN sessions s ON s.id = r.session_id
WHERE r.id = $1
FOR UPDATE OF s
"""
# Whether an open run of $1's session retries $1, directly or up its retry chain.
HELD = """
WITH RECURSIVE chain(id, retry_of) AS (
    SELECT id, retry_of FROM processing_runs
    WHERE session_id = (SELECT session_id FROM processing_runs WHERE id = $1)
      AND completed_at IS NULL
    UNION ALL
    SELECT r.id, r.retry_of FROM processing_runs r JOIN chain c ON r.id = c.retry_of
)
SELECT EXISTS (SELECT 1 FROM chain WHERE retry_of = $1)
"""
MARK_REMOVED = """
UPDATE processing_runs SET outputs_removed_at = coalesce(outputs_removed_at, $2)
WHERE id = $1
"""
FORGET_DATASETS = "DELETE FROM derived_datasets WHERE run_id = $1"

# Of the runs $2, those whose directory a kept run points into ($1: the URL of datasets/).
POINTED = f"SELECT r.id FROM processing_runs r WHERE r.id = ANY($2::uuid[]) AND {_POINTED_INTO}"

# Of the runs $2, whose rows are gone, those whose directory a kept run's dataset lies in. The
# session is unknown without the row, so every dataset row is looked at: a scan, made only while
# such a directory exists (rows removed by hand).
POINTED_WITHOUT_ROW = """
SELECT p.id FROM unnest($2::uuid[]) AS p(id)
WHERE EXISTS (SELECT 1 FROM derived_datasets k JOIN processing_runs o ON o.id = k.run_id
              WHERE o.outputs_removed_at IS NULL
                AND starts_with(k.storage_url, $1 || p.id::text || '/'))
"""

# Artifacts marked deleted, and whether a run still open reads them.
DELETED = """
SELECT a.id, a.storage_url, a.bytes,
       EXISTS (SELECT 1 FROM run_artifacts ra JOIN processing_runs r ON r.id = ra.run_id
               WHERE ra.artifact_id = a.id AND r.completed_at IS NULL) AS in_use
FROM artifacts a WHERE a.status = 'deleted'
ORDER BY a.id
"""

# The runs of the directories $1 that still have a row, and whether each directory is a
# leftover: the run's outputs were removed (marked, no dataset row left) but its directory was
# kept because a kept run pointed into it.
KNOWN_RUNS = """
SELECT r.id, r.outputs_removed_at IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM derived_datasets d WHERE d.run_id = r.id) AS leftover
FROM processing_runs r WHERE r.id = ANY($1::uuid[])
"""

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
    """What removing its directory frees: its own files, none while a kept run points in."""
    datasets: int
    held: bool = False
    """An open run retries it (directly or up its chain) and may still reuse its outputs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Stored:
    """An object-store entry (file or directory): when it was last written, its size."""

    key: str
    written_at: datetime | None
    bytes: int = 0
    in_use: bool = False
    """An open run reads it (deleted artifacts); a kept run's dataset lies in it (datasets)."""


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
        held = run.held and not run.removing  # a marked run is never reused again
        expires = None if held else run.superseded_at + grace
        action = DROP if run.removing or (expires is not None and expires <= now) else KEEP
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
        expires = None if orphan.in_use else (orphan.written_at or now) + leftover
        items.append(
            PlanItem(
                tier=ORPHAN_DATASETS,
                target=orphan.key,
                expires_at=expires,
                action=DROP if expires is not None and expires <= now else KEEP,
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


def _datasets_url(store: ObjectStore) -> str:
    """The URL prefix of every run's directory: ``<root>/datasets/``."""
    return store.url("datasets") + "/"


async def inventory(conn: Conn, store: ObjectStore) -> Inventory:
    """What the batch half holds that retention looks at."""
    datasets_url = _datasets_url(store)
    runs = tuple(
        Run(
            id=r["id"],
            superseded_at=r["superseded_at"],
            removing=r["outputs_removed_at"] is not None,
            bytes=0 if r["pointed"] else r["bytes"],
            datasets=r["datasets"],
            held=r["held"],
        )
        for r in await conn.fetch(SUPERSEDED, datasets_url)
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
    known = {r["id"]: r["leftover"] for r in await conn.fetch(KNOWN_RUNS, list(ids.values()))}
    gone = [run for run in ids.values() if run not in known]
    leftovers = [run for run, leftover in known.items() if leftover]
    pointed = set()
    if leftovers:
        pointed |= {r["id"] for r in await conn.fetch(POINTED, datasets_url, leftovers)}
    if gone:
        pointed |= {r["id"] for r in await conn.fetch(POINTED_WITHOUT_ROW, datasets_url, gone)}
    orphans = [
        await _stored(store, key, in_use=run in pointed)
        for key, run in ids.items()
        if run not in known or known[run]
    ]
    temps = [await _stored(store, key) for key in await asyncio.to_thread(store.children, "tmp")]
    return Inventory(
        runs=runs,
        deleted_artifacts=tuple(deleted),
        orphan_datasets=tuple(orphans),
        tmp=tuple(temps),
        oldest_running=await conn.fetchval(OLDEST_RUNNING),
    )


async def _stored(store: ObjectStore, key: str, *, in_use: bool = False) -> Stored:
    written_at, size = await asyncio.to_thread(store.footprint, key)
    return Stored(key=key, written_at=written_at, bytes=size, in_use=in_use)


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
                refused = await _remove_run(conn, store, ch, tables, run, now)
                if refused is not None:
                    skipped.append((item.target, refused))
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
) -> str | None:
    """Mark ``run`` (unless it is active again, or an open run retries it), then remove its
    ClickHouse rows, its directory (unless a kept run points into it) and its
    ``derived_datasets`` rows, in that order (a stop half-way is finished later). Returns why
    it was left alone, or ``None`` when it was removed."""
    async with conn.transaction():
        row = await conn.fetchrow(LOCK_SESSION_OF_RUN, run)
        if row is None:
            return "its row no longer exists"
        if row["active_run_id"] == run:
            return "it is its session's active run again"
        if row["outputs_removed_at"] is None and await conn.fetchval(HELD, run):
            return "an open run retries it and may reuse its outputs"
        await conn.execute(MARK_REMOVED, run, now)
    for table in tables:
        # Through the tables' primary key (session_id, run_id, row_no), as
        # streams.sessions.materialise.RUN_ROWS (not imported: ingest runs retention).
        await ch.command(
            f"DELETE FROM {ch.database}.{table}"
            " WHERE session_id = {session:UUID} AND run_id = {run:UUID}",
            {"session": str(row["session_id"]), "run": str(run)},
        )
    # Asked after the mark: from then on no run can start pointing into the directory.
    if not await conn.fetch(POINTED, _datasets_url(store), [run]):
        await asyncio.to_thread(store.remove_expired, f"datasets/{run}")
    await conn.execute(FORGET_DATASETS, run)
    return None
