"""Partition maintenance: create ahead, start dedupe generations, drop what expired.

One *maintenance round* (:func:`maintain_once`) runs in whichever process holds the
session-level advisory lock ``MAINTENANCE_LOCK_KEY`` (``pg_try_advisory_lock``: every consumer
process runs :func:`maintenance_loop`, and the one that gets the lock does the round; a
leader that dies releases it with its connection). A round:

1. creates the partitions of the next ``retention.partitions_ahead`` buckets of each
   streaming table that do not exist yet (rows already in the DEFAULT partition for such a
   bucket are moved into it first), and the dedupe generation partition after the current
   one — so the hot path never creates anything;
2. starts a new dedupe generation when the current one belongs to an earlier bucket of
   ``retention.dedupe_generation_s`` (4 days by default, longer than a partition: a dedupe
   read probes every kept generation), holding the writers' barrier exclusively
   (``streams.ingest.sql.WRITE_BARRIER``);
3. carries out the retention plan (:mod:`streams.retention.plan`): an expired partition is
   detached, the rows of open dead letters in it are put back (they land in DEFAULT, whose
   range now covers them), and it is dropped — all in one short transaction. ``DETACH ...
   CONCURRENTLY`` is not allowed while a DEFAULT partition exists, so the detach takes its
   ACCESS EXCLUSIVE lock for the few milliseconds of catalogue work, with ``lock_timeout``
   so that it gives up (and tries again next round) rather than queue the hot path behind a
   long transaction. Expired rows in DEFAULT partitions and resolved dead letters past their
   retention are deleted (both small).
4. carries out the batch half's items (:mod:`streams.retention.batch`: superseded runs'
   datasets and ClickHouse rows, deleted artifacts, ``tmp/`` leftovers; and
   :mod:`streams.retention.unrecorded_outputs`: output directories that no dataset row
   records, of jobs that ended without success) in the same plan.

With ``retention.archive`` naming a partition's tier, step 3 exports it to Parquet in the
object store, verifies and records the object, and only then drops it, in one transaction
(:mod:`streams.retention.archive`); an export that fails leaves the partition in place.

Every DDL statement gets ``lock_timeout`` = :data:`LOCK_TIMEOUT_MS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from streams.adapters.errors import PG_NOT_CONNECTED, PgError, PgLockNotAvailable
from streams.adapters.postgres import Conn, Pool
from streams.config import Settings
from streams.errors import TidewayError
from streams.objects import ObjectStore
from streams.observability.events import RetentionObserver
from streams.retention import archive, batch, sql, unrecorded_outputs
from streams.retention.plan import (
    DEAD_LETTERS,
    DEDUPE,
    DELETE,
    DROP,
    TIER_OF,
    TIERS,
    Partition,
    PlanItem,
    Tier,
    buckets_ahead,
    generation_due,
    plan,
    retention_of,
)
from streams.retention.sql import ident

log = logging.getLogger(__name__)

LOCK_TIMEOUT_MS = 2000
_TABLES = [tier.table for tier in (*TIERS, DEDUPE)]


@dataclass(kw_only=True)
class Round:
    """What one maintenance round did."""

    created: list[str] = field(default_factory=list)
    generation: int | None = None
    """The dedupe generation started, if one was."""
    done: list[PlanItem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(target, why) of what could not be done now (a lock not granted in time)."""
    archives: list[tuple[str, str, int]] = field(default_factory=list)
    """(tier, outcome, rows) of each archive tried: ``archived`` or ``failed``."""
    summarized: int = 0
    """BRIN page ranges summarized (:func:`summarize_recent`)."""


def _partition(row: Any) -> Partition:
    """A row of ``sql.PARTITIONS`` as a :class:`Partition`: bounds parsed (generation numbers
    for the dedupe keys, times for the rest), none for DEFAULT."""
    parent, name = row["parent"], row["name"]
    if row["bound"] == "DEFAULT":
        return Partition(parent=parent, name=name, lo=None, hi=None, bytes=row["bytes"])
    lo_text, hi_text = row["bounds"]
    lo: datetime | int
    hi: datetime | int
    if parent == DEDUPE.table:
        lo, hi = int(lo_text), int(hi_text)
    else:
        lo, hi = datetime.fromisoformat(lo_text), datetime.fromisoformat(hi_text)
    return Partition(parent=parent, name=name, lo=lo, hi=hi, bytes=row["bytes"])


async def inventory(
    conn: Conn, settings: Settings, now: datetime
) -> tuple[list[Partition], list[tuple[int, datetime]], tuple[int, int]]:
    """The partitions, dedupe generations and expired resolved dead letters."""
    partitions: list[Partition] = []
    for row in await conn.fetch(sql.PARTITIONS, _TABLES):
        part = _partition(row)
        if part.is_default:
            tier = TIER_OF[part.parent]
            cutoff = now - retention_of(settings.retention, tier)
            expired = await conn.fetchval(
                f"SELECT count(*) FROM {ident(part.name)} WHERE {tier.column} < $1", cutoff
            )
            part = replace(part, expired_rows=expired)
        partitions.append(part)
    generations = [(r["gen"], r["started_at"]) for r in await conn.fetch(sql.GENERATIONS)]
    dead = await conn.fetchrow(
        sql.RESOLVED_DEAD_LETTERS, settings.retention.resolved_dead_letters_s, now
    )
    assert dead is not None  # an aggregate always returns its row
    return partitions, generations, (dead["rows"], dead["bytes"])


async def current_plan(conn: Conn, settings: Settings, now: datetime) -> list[PlanItem]:
    """The retention plan as of ``now`` (what ``tideway retention show`` prints)."""
    partitions, generations, dead = await inventory(conn, settings, now)
    items = plan(partitions, generations, settings.retention, now, resolved_dead_letters=dead)
    items = archive.annotate(items, partitions, settings.retention, TIERS)
    items += await archive.plan_items(conn, settings.retention, now)
    items += await batch.plan_items(conn, settings, now)
    return items + await unrecorded_outputs.plan_items(conn, settings, now)


async def _ddl(conn: Conn, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
        for statement, args in statements:
            await conn.execute(statement, *args)


async def ensure_ahead(conn: Conn, settings: Settings, now: datetime) -> list[str]:
    """Create the partitions of the coming buckets, and the next dedupe generation's."""
    r = settings.retention
    partitions, _, _ = await inventory(conn, settings, now)
    created = []
    for tier in TIERS:
        table, column = tier.table, tier.column
        for name, lo, hi in buckets_ahead(
            table, partitions, now, r.partition_grain_s, r.partitions_ahead
        ):
            # Built beside the table and attached: ATTACH takes only SHARE UPDATE EXCLUSIVE
            # on the parent, so ingest goes on; rows that reached DEFAULT for this bucket
            # (a clock ahead of ours) move in first.
            await _ddl(
                conn,
                [
                    (
                        f"CREATE TABLE {ident(name)} (LIKE {ident(table)} "
                        "INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
                        (),
                    ),
                    # No new stray rows while they move (reads go on).
                    (f"LOCK TABLE {ident(table + '_default')} IN EXCLUSIVE MODE", ()),
                    (
                        f"WITH moved AS (DELETE FROM {ident(table + '_default')} "
                        f"WHERE {column} >= $1 AND {column} < $2 RETURNING *) "
                        f"INSERT INTO {ident(name)} SELECT * FROM moved",
                        (lo, hi),
                    ),
                    (
                        f"ALTER TABLE {ident(table)} ATTACH PARTITION {ident(name)} "
                        f"FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')",
                        (),
                    ),
                ],
            )
            created.append(name)
    return created + await ensure_generations(conn)


async def ensure_generations(conn: Conn) -> list[str]:
    """Create the partitions of the current dedupe generation and the next one."""
    current = max(r["gen"] for r in await conn.fetch(sql.GENERATIONS))
    have = {r["name"] for r in await conn.fetch(sql.PARTITIONS, [DEDUPE.table])}
    created = []
    for gen in (current, current + 1):
        name = f"{DEDUPE.table}_g{gen}"
        if name not in have:
            await _ddl(
                conn,
                [
                    (
                        f"CREATE TABLE {ident(name)} PARTITION OF {DEDUPE.table} "
                        f"FOR VALUES FROM ({gen}) TO ({gen + 1})",
                        (),
                    )
                ],
            )
            created.append(name)
    return created


async def start_generation(conn: Conn, now: datetime) -> int:
    """Start the next dedupe generation (its partition exists: :func:`ensure_generations`),
    holding the writers' barrier exclusively: every recording transaction of the current
    generation has committed before the first one of the next begins."""
    current = max(r["gen"] for r in await conn.fetch(sql.GENERATIONS))
    await _ddl(
        conn,
        [
            (sql.BARRIER_EXCLUSIVE, (sql.DEDUPE_BARRIER_KEY,)),
            (sql.START_GENERATION, (current + 1, now)),
        ],
    )
    return int(current + 1)


async def start_generation_if_due(conn: Conn, settings: Settings, now: datetime) -> int | None:
    """:func:`start_generation` when the current one belongs to an earlier bucket than
    ``now``. Returns the generation started, if one was."""
    last = (await conn.fetch(sql.GENERATIONS))[-1]
    if not generation_due(last["started_at"], now, settings.retention.dedupe_generation_s):
        return None
    return await start_generation(conn, now)


async def execute(
    conn: Conn,
    settings: Settings,
    items: Sequence[PlanItem],
    now: datetime,
    *,
    archives: list[tuple[str, str, int]] | None = None,
) -> tuple[list[PlanItem], list[tuple[str, str]]]:
    """Carry out the ``drop`` and ``delete`` items; returns (done, skipped). ``archives``
    gets (tier, outcome, rows) of each partition archived, or not, before its drop."""
    archives = [] if archives is None else archives
    by_tier = {tier.name: tier for tier in (*TIERS, DEDUPE)}
    done, skipped = [], []
    for item in items:
        if item.action not in (DROP, DELETE) or item.tier in (
            *batch.TIERS, archive.ARCHIVES, unrecorded_outputs.TIER
        ):
            continue
        try:
            if item.tier == DEAD_LETTERS:
                await conn.execute(
                    sql.DELETE_RESOLVED_DEAD_LETTERS,
                    settings.retention.resolved_dead_letters_s,
                    now,
                )
            elif item.action == DELETE:
                why, rows = await _delete_expired_default(
                    conn, settings, by_tier[item.tier], item, now
                )
                if why or rows:  # an archive was made, or tried and failed
                    archives.append((item.tier, "failed" if why else "archived", rows))
                if why is not None:
                    skipped.append((item.target, why))
                    continue
            elif item.tier in settings.retention.archive:
                why, rows = await _archive_then_drop(
                    conn, settings, by_tier[item.tier], item.target
                )
                archives.append((item.tier, "failed" if why else "archived", rows))
                if why is not None:
                    skipped.append((item.target, why))
                    continue
            elif item.tier == DEDUPE.name:
                gen = int(item.target.rsplit("_g", 1)[1])
                await _ddl(
                    conn,
                    [(f"DROP TABLE {ident(item.target)}", ()), (sql.FORGET_GENERATION, (gen,))],
                )
            else:
                await _drop(conn, by_tier[item.tier], item.target, detach=True)
        except PgLockNotAvailable:
            skipped.append((item.target, f"lock not granted within {LOCK_TIMEOUT_MS} ms"))
            continue
        done.append(item)
    if any(item.tier == archive.ARCHIVES for item in items):
        removed, kept = await archive.remove_expired(
            conn, ObjectStore(settings.objects()), items
        )
        done, skipped = done + removed, skipped + kept
    batch_done, batch_skipped = await batch.execute(conn, settings, items, now)
    swept, kept = await unrecorded_outputs.execute(settings, items)
    return done + batch_done + swept, skipped + batch_skipped + kept


async def _drop(conn: Conn, tier: Tier, name: str, *, detach: bool) -> None:
    statements: list[tuple[str, Sequence[Any]]] = []
    if detach:
        statements.append((f"ALTER TABLE {ident(tier.table)} DETACH PARTITION {ident(name)}", ()))
    if tier.keep_open_dead_letters:
        # Back into the table: the range is no longer covered, so they land in DEFAULT. One
        # index probe per open dead letter (a subquery with a LIMIT is not made a join): an
        # IN (…) semi-join may scan the whole partition instead, and the detach holds the
        # parent's lock until the commit.
        statements.append(
            (
                f"INSERT INTO {ident(tier.table)} SELECT p.* FROM ({sql.OPEN_DEAD_LETTER_IDS})"
                f" AS d(id) CROSS JOIN LATERAL (SELECT * FROM {ident(name)} AS p"
                f" WHERE p.{ident(tier.keep_open_dead_letters)} = d.id AND {tier.kept_rows}"
                f" LIMIT 1) AS p",
                (),
            )
        )
    statements.append((f"DROP TABLE {ident(name)}", ()))
    await _ddl(conn, statements)


async def _archived(what: str, kept: str, run: Awaitable[int]) -> tuple[str | None, int]:
    """Await an archive (``run`` answers the rows archived): (``None``, rows) when done, else
    (why not, 0) and a warning: what it would have removed (``kept``) stays for the next
    round. A lock not granted is raised, to be skipped like any drop's."""
    try:
        rows = await run
    except PgLockNotAvailable:
        raise
    except (TidewayError, pa.ArrowException, PgError) as exc:
        code = getattr(exc, "code", None) or getattr(exc, "sqlstate", None) or type(exc).__name__
        log.warning("archive of %s failed, %s kept: %s (%s)", what, kept, exc, code)
        return f"archive failed, {kept} kept: {code}: {exc}", 0
    return None, rows


async def _archive_then_drop(
    conn: Conn, settings: Settings, tier: Tier, name: str
) -> tuple[str | None, int]:
    """:func:`archive.archive_then_drop` with this module's drop: (``None``, rows archived)
    when done, else (why not, 0): the partition stays; the next round tries again."""

    async def run() -> int:
        done = await archive.archive_then_drop(
            conn,
            ObjectStore(settings.objects()),
            settings.retention,
            tier=tier,
            partition=name,
            lock_timeout_ms=LOCK_TIMEOUT_MS,
            drop=lambda: _drop(conn, tier, name, detach=True),
        )
        return done.rows

    return await _archived(name, "partition", run())


async def _delete_expired_default(
    conn: Conn, settings: Settings, tier: Tier, item: PlanItem, now: datetime
) -> tuple[str | None, int]:
    """Delete the expired rows of a DEFAULT partition (not those of open dead letters); of an
    archived tier, archive them first (:func:`archive.archive_then_delete`). Returns, like
    :func:`_archive_then_drop`, (``None``, rows archived) or (why not, 0): the rows stay."""
    cutoff = now - retention_of(settings.retention, tier)
    keep = (
        f" AND {tier.keep_open_dead_letters} NOT IN ({sql.OPEN_DEAD_LETTER_IDS})"
        if tier.keep_open_dead_letters
        else ""
    )
    where = f"{tier.column} < $1{keep}"
    if tier.name not in settings.retention.archive:
        await conn.execute(f"DELETE FROM {ident(item.target)} WHERE {where}", cutoff)
        return None, 0

    async def run() -> int:
        done = await archive.archive_then_delete(
            conn,
            ObjectStore(settings.objects()),
            settings.retention,
            tier=tier,
            partition=item.target,
            where=where,
            args=(cutoff,),
            cutoff=cutoff,
            lock_timeout_ms=LOCK_TIMEOUT_MS,
        )
        return done.rows if done else 0

    return await _archived(f"{item.target}'s expired rows", "rows", run())


async def summarize_recent(conn: Conn, settings: Settings, now: datetime) -> int:
    """Summarize the new page ranges of the BRIN indexes of the partitions still written to
    (this bucket's and the one before, and DEFAULT); returns how many ranges.

    A BRIN index knows nothing of the pages added since its last summary, so every scan
    through it reads them all: telemetry found by message id and a window of arrivals
    (migration 0020), stage logs by message id (0019). ``autosummarize`` has autovacuum do
    this once a range fills, where autovacuum runs; the round does it whatever the server's
    settings, every ``maintenance_interval_s``, reading only the ranges it summarizes and the
    index's range map. Older partitions were summarized when they were recent."""
    recent = now - timedelta(seconds=settings.retention.partition_grain_s)
    # The catalogue's partitions alone: :func:`inventory` would also count DEFAULT's expired
    # rows, which this does not need.
    partitions = [_partition(row) for row in await conn.fetch(sql.PARTITIONS, _TABLES)]
    names = [p.name for p in partitions
             if p.hi is None or (isinstance(p.hi, datetime) and p.hi > recent)]
    ranges = 0
    for row in await conn.fetch(sql.BRIN_INDEXES, names):
        ranges += int(await conn.fetchval(sql.SUMMARIZE_BRIN, row["index"]))
    return ranges


async def finish_detached(conn: Conn) -> list[str]:
    """Drop tables a stopped run left detached (keeping their open dead letters' rows)."""
    names = [r["name"] for r in await conn.fetch(sql.DETACHED, [t.table for t in TIERS])]
    for name in names:
        tier = next(t for t in TIERS if name.startswith(t.table + "_p"))
        await _drop(conn, tier, name, detach=False)
    return names


async def maintain_once(
    pool: Pool,
    settings: Settings,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    wait: bool = False,
) -> Round | None:
    """One maintenance round, if this process is the leader now (else ``None``); with
    ``wait``, after the current leader's round (a consumer starting: its first batch must
    not race a round creating today's partition)."""
    async with pool.acquire() as conn:
        if wait:
            await conn.execute(sql.LEAD, sql.MAINTENANCE_LOCK_KEY)
        elif not await conn.fetchval(sql.TRY_LEAD, sql.MAINTENANCE_LOCK_KEY):
            return None
        try:
            return await _round(conn, settings, now or datetime.now(UTC), dry_run)
        finally:
            await conn.execute(sql.STOP_LEADING, sql.MAINTENANCE_LOCK_KEY)


async def _round(conn: Conn, settings: Settings, now: datetime, dry_run: bool) -> Round:
    out = Round()
    items = await current_plan(conn, settings, now)
    if dry_run:
        out.done = [i for i in items if i.action in (DROP, DELETE)]
        return out
    await finish_detached(conn)
    try:
        out.created = await ensure_ahead(conn, settings, now)
    except PgLockNotAvailable:  # the next round creates what is still missing
        out.skipped.append(("partitions ahead", f"lock not granted within {LOCK_TIMEOUT_MS} ms"))
    try:
        out.generation = await start_generation_if_due(conn, settings, now)
    except PgLockNotAvailable:  # recording transactions held the barrier too long
        out.skipped.append(
            ("dedupe generation", f"barrier not granted within {LOCK_TIMEOUT_MS} ms")
        )
    out.done, skipped = await execute(
        conn, settings, await current_plan(conn, settings, now), now, archives=out.archives
    )
    out.skipped += skipped
    out.summarized = await summarize_recent(conn, settings, now)
    return out


async def run_round(
    pool: Pool,
    settings: Settings,
    *,
    wait: bool = False,
    observer: RetentionObserver | None = None,
) -> None:
    """:func:`maintain_once` now, logging what it did (and telling ``observer`` about the
    archives it made or failed to make); a failed round is logged and left to the next one
    (ingest must not stop for it)."""
    try:
        done = await maintain_once(pool, settings, wait=wait)
    except PG_NOT_CONNECTED as exc:
        # Postgres is away: the consumer's own outage log says so; the next round tries again.
        log.info("partition maintenance deferred: %s", exc)
        return
    except Exception as exc:
        log.warning("partition maintenance failed: %s", exc)
        return
    if done is None:
        return
    if observer is not None:
        for tier, outcome, rows in done.archives:
            observer.on_archive(tier=tier, outcome=outcome, rows=rows)
    if done.created or done.done or done.generation:
        log.info(
            "partition maintenance: created %s; dedupe generation %s; %s",
            done.created,
            done.generation,
            [f"{i.action} {i.target}" for i in done.done],
        )
    for target, why in done.skipped:
        log.warning("partition maintenance skipped %s: %s", target, why)


async def maintenance_loop(
    pool: Pool,
    settings: Settings,
    stop: asyncio.Event,
    observer: RetentionObserver | None = None,
) -> None:
    """:func:`run_round` every ``retention.maintenance_interval_s`` until ``stop`` (the
    consumer runs the first round itself, before it starts fetching)."""
    interval = settings.retention.maintenance_interval_s
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        if not stop.is_set():
            await run_round(pool, settings, observer=observer)
