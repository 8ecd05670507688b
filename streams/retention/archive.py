"""Archive before drop: an expired partition exported to Parquet in the object store.

Theory of operation
-------------------
``retention.archive`` names the tiers (``stage_logs``, ``ingestion_records``,
``telemetry_logs``) whose expired partitions are archived; none by default. For such a
partition the maintenance round (:mod:`streams.retention.maintain`) calls
:func:`archive_then_drop` instead of dropping it outright, and everything happens in **one
transaction** on the leader's connection:

1. ``LOCK TABLE <partition> IN SHARE MODE`` (with the round's ``lock_timeout``): from here to
   the commit nothing can change the partition's rows, so what is exported is exactly what is
   dropped. Only writers *of that partition* wait (an expired partition has almost none: a
   redrive's update of a message with an open dead letter); ingest writes today's partition.
2. The columns are read from the catalogue, whatever they are today (another change may add,
   drop or retype columns): each Postgres type maps to an Arrow type (:func:`arrow_type`),
   types without a natural Arrow form (uuid, json, jsonb, numeric, enums...) travel as their
   Postgres text. Every field keeps its Postgres type in its metadata (``pg_type``).
3. A server-side cursor (``DECLARE ... CURSOR``) streams the rows
   ``retention.archive_batch_rows`` at a time; each batch becomes one Parquet row group
   (zstd, page checksums), converted and written in a worker thread (the event loop only
   receives rows), through the object store's :class:`~streams.objects.ObjectWriter`, which
   hashes the bytes as they go to a ``tmp/`` key. Memory stays at one batch whatever the
   partition's size.
4. The object is promoted to its stable key (:func:`archive_key`:
   ``archive/<table>/day=<YYYY-MM-DD>/<partition>.parquet``) and **verified** there: its
   Parquet footer must count the rows the cursor streamed and ``count(*)`` of the partition
   finds, and the stored bytes must hash to the sha256 the writer computed
   (``ARCHIVE_MISMATCH`` otherwise).
5. A ``retention_archives`` row records it (key, sha256, bytes, rows, the partition's time
   range, the range of message ids in it); then the partition is dropped (the maintenance
   round's own detach / keep-open-dead-letters / drop statements); then the commit.

Any failure before the commit rolls everything back: the partition stays, attached, and the
object is removed again; the round logs it and lists it as skipped, and the next round tries
again. A commit that fails after the promotion leaves an object that no row records; the next
attempt finds it at its key, removes it (:meth:`ObjectStore.discard_unrecorded_archive`) and
exports again. So a partition is always either in Postgres or recorded here with a verified
object — never neither.

The export holds a snapshot for its duration (as any consistent export must): on a large
partition that is minutes in which vacuum cannot remove newer dead rows.

Archives are kept for ``retention.archives_s`` (none: until something outside Tideway removes
them), counted from the end of their partition's time range like the tiers: the round's plan
lists each expired archive (tier ``archives``, action ``drop``, :func:`plan_items`) and
:func:`remove_expired` removes its object, then the row recording it (an object removed
whose row survives a failure is removed again, as a no-op, by the next round).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streams.adapters.postgres import Conn
from streams.config import RetentionSettings
from streams.errors import PermanentError, TransientError
from streams.objects import ObjectStore, ObjectWriter
from streams.retention.plan import DROP, KEEP, Partition, PlanItem, Tier
from streams.retention.sql import ident

log = logging.getLogger(__name__)

PREFIX = "archive"

# The columns naming a row's messages (``ingestion_messages.id``), per table: the lowest and
# the highest id a row holds; the same column for a row of one message, two for a row of
# many (a stage-pass row holds a transaction's passes; migration 0019). Recorded as an id
# range per object, so that explaining a message reads only the objects that can hold it.
MESSAGE_ID_BOUNDS = {
    "ingestion_messages": ("id", "id"),
    "ingestion_stage_passes": ("message_id_min", "message_id_max"),
    "device_telemetry_logs": ("ingestion_message_id", "ingestion_message_id"),
}

# -- statements -------------------------------------------------------------------------------

# A relation's columns in order, each with its type as Postgres spells it, the base type
# (through one domain) and, for an array, its element type.
COLUMNS = """
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS pg_type,
       bt.typname AS base, bt.typcategory::text AS category, et.typname AS element
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_type et ON et.oid = bt.typelem AND bt.typcategory = 'A'
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

# A partition's parent and bounds (a time range; these tables have no other kind).
BOUNDS = r"""
SELECT parent.relname AS parent,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                     'FROM \(''([^'']*)''\) TO \(''([^'']*)''\)')) AS bounds
FROM pg_class c
JOIN pg_inherits i ON i.inhrelid = c.oid
JOIN pg_class parent ON parent.oid = i.inhparent
WHERE c.oid = $1::regclass
"""

RECORDED = "SELECT 1 FROM retention_archives WHERE object_key = $1"

RECORD = """
INSERT INTO retention_archives (tier, parent_table, partition_name, range_lo, range_hi,
                                object_key, sha256, bytes, rows, message_id_min, message_id_max)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""

TOTALS = """
SELECT count(*) AS objects, coalesce(sum(bytes), 0)::bigint AS bytes FROM retention_archives
"""


class ArchiveMismatchError(PermanentError):
    """A written archive does not hold what was exported (rows or bytes differ)."""

    code = "ARCHIVE_MISMATCH"


# -- pure: keys, types, the plan's annotation ---------------------------------------------------


def archive_key(table: str, partition: str, lo: datetime) -> str:
    """The stable key of a partition's archive: one per table and partition (a day folder,
    in the ``day=`` form query engines read as a column)."""
    return f"{PREFIX}/{table}/day={lo:%Y-%m-%d}/{partition}.parquet"


_SCALAR: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "oid": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "text": pa.string(),
    "varchar": pa.string(),
    "bpchar": pa.string(),
    "name": pa.string(),
    "bytea": pa.binary(),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp": pa.timestamp("us"),
    "date": pa.date32(),
    "time": pa.time64("us"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    """One column of a partition and how it is exported."""

    name: str
    pg_type: str
    """As Postgres spells it (``format_type``), kept in the Parquet field's metadata."""
    select: str
    """The expression the export selects (the column, or its text form)."""
    arrow: pa.DataType


def arrow_type(name: str, pg_type: str, base: str, category: str, element: str | None) -> Column:
    """How a column of Postgres type ``base`` (``element`` for an array) is exported: natively
    when Arrow has the type, else as the Postgres text form (uuid, json and jsonb as their
    canonical text; numeric, intervals, enums, anything newer likewise)."""
    col = ident(name)
    if category == "A" and element is not None:
        if element in _SCALAR:
            return Column(name=name, pg_type=pg_type, select=col, arrow=pa.list_(_SCALAR[element]))
        return Column(
            name=name, pg_type=pg_type, select=f"{col}::text[]", arrow=pa.list_(pa.string())
        )
    if base in _SCALAR:
        return Column(name=name, pg_type=pg_type, select=col, arrow=_SCALAR[base])
    return Column(name=name, pg_type=pg_type, select=f"{col}::text", arrow=pa.string())


def arrow_schema(columns: Sequence[Column], metadata: dict[str, str]) -> pa.Schema:
    return pa.schema(
        [pa.field(c.name, c.arrow, metadata={"pg_type": c.pg_type}) for c in columns],
        metadata=metadata,
    )


def annotate(
    items: Sequence[PlanItem],
    partitions: Sequence[Partition],
    settings: RetentionSettings,
    tiers: Sequence[Tier],
) -> list[PlanItem]:
    """The plan with ``archive_to`` set on every time partition of an archived tier: where it
    goes (``drop``) or will go when it expires (``keep``)."""
    archived: dict[str, Tier] = {t.name: t for t in tiers if t.name in settings.archive}
    lo_of = {p.name: p.lo for p in partitions if isinstance(p.lo, datetime)}
    out = []
    for item in items:
        tier = archived.get(item.tier)
        lo = lo_of.get(item.target)
        if tier is not None and lo is not None and item.action in (KEEP, DROP):
            item = replace(item, archive_to=archive_key(tier.table, item.target, lo))
        out.append(item)
    return out


# -- the export -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Archived:
    """A partition's archive, as recorded."""

    key: str
    sha256: str
    bytes: int
    rows: int
    message_id_min: int | None
    message_id_max: int | None


class _Sink:
    """The file-like object ``ParquetWriter`` writes to: the store's hashing writer."""

    def __init__(self, writer: ObjectWriter) -> None:
        self._writer = writer
        self.closed = False
        self.discarded = False
        """Set on abort: whatever the Parquet writer still flushes goes nowhere."""

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        if not self.discarded:
            self._writer.write(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._writer.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Export:
    """Rows in, Parquet row groups out (the blocking half: runs in a worker thread)."""

    def __init__(
        self, store: ObjectStore, schema: pa.Schema, id_bounds: tuple[str, str] | None
    ) -> None:
        self.writer = store.writer()
        self._sink = _Sink(self.writer)
        self._parquet = pq.ParquetWriter(
            self._sink, schema, compression="zstd", write_page_checksum=True
        )
        self._schema = schema
        self._lo: int = schema.get_field_index(id_bounds[0]) if id_bounds else -1
        self._hi: int = schema.get_field_index(id_bounds[1]) if id_bounds else -1
        self.rows = 0
        self.id_min: int | None = None
        self.id_max: int | None = None

    def add(self, records: Sequence[Any]) -> None:
        arrays = [
            pa.array([r[i] for r in records], type=field.type)
            for i, field in enumerate(self._schema)
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        self._parquet.write_batch(batch)
        self.rows += len(records)
        if self._lo >= 0:
            los = [r[self._lo] for r in records if r[self._lo] is not None]
            his = [r[self._hi] for r in records if r[self._hi] is not None]
            if los and his:
                lo, hi = min(los), max(his)
                self.id_min = lo if self.id_min is None else min(self.id_min, lo)
                self.id_max = hi if self.id_max is None else max(self.id_max, hi)

    def finish(self) -> None:
        self._parquet.close()

    def abort(self) -> None:
        self._sink.discarded = True
        try:
            self._parquet.close()
        finally:
            self.writer.abort()


async def export(
    conn: Conn,
    store: ObjectStore,
    *,
    table: str,
    partition: str,
    key: str,
    metadata: dict[str, str],
    batch_rows: int,
) -> tuple[Archived, bool]:
    """Stream ``partition`` into a Parquet object at ``key`` (module docstring, steps 2-4;
    call inside a transaction). Returns what was written and whether this call created the
    object (``False``: the key already held identical bytes)."""
    columns = [
        arrow_type(r["name"], r["pg_type"], r["base"], r["category"], r["element"])
        for r in await conn.fetch(COLUMNS, partition)
    ]
    schema = arrow_schema(columns, metadata)
    id_bounds = MESSAGE_ID_BOUNDS.get(table)
    if id_bounds is not None and not set(id_bounds) <= set(schema.names):
        id_bounds = None  # a layout without them: the lookup reads every object of the table
    out = await asyncio.to_thread(_Export, store, schema, id_bounds)
    try:
        # A named cursor, closed when read (an open portal on the partition would forbid
        # dropping it in this transaction); named afresh each time, because asyncpg caches
        # the FETCH statement with the row shape it first returned.
        cursor = f"tideway_archive_{uuid.uuid4().hex}"
        await conn.execute(
            f"DECLARE {cursor} NO SCROLL CURSOR FOR "
            f"SELECT {', '.join(c.select for c in columns)} FROM {ident(partition)}"
        )
        while records := await conn.fetch(f"FETCH FORWARD {int(batch_rows)} FROM {cursor}"):
            await asyncio.to_thread(out.add, records)
        await conn.execute(f"CLOSE {cursor}")
        await asyncio.to_thread(out.finish)
    except BaseException:
        await asyncio.to_thread(out.abort)
        raise
    stored = await asyncio.to_thread(out.writer.commit, key)
    return (
        Archived(
            key=key,
            sha256=stored.sha256,
            bytes=stored.size,
            rows=out.rows,
            message_id_min=out.id_min,
            message_id_max=out.id_max,
        ),
        stored.created,
    )


def verify(store: ObjectStore, archived: Archived, rows: int) -> None:
    """The object at ``archived.key`` holds ``rows`` rows (its footer says so, and the export
    streamed as many) and its bytes hash to ``archived.sha256``."""
    with store.open_input_file(archived.key) as f:
        footer_rows = pq.ParquetFile(f).metadata.num_rows
        f.seek(0)
        digest = hashlib.sha256()
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if not footer_rows == archived.rows == rows:
        raise ArchiveMismatchError(
            f"{archived.key}: the object holds {footer_rows} rows, the export streamed "
            f"{archived.rows}, the partition holds {rows}"
        )
    if digest.hexdigest() != archived.sha256:
        raise ArchiveMismatchError(
            f"{archived.key}: stored bytes hash to {digest.hexdigest()}, written {archived.sha256}"
        )


async def archive_then_drop(
    conn: Conn,
    store: ObjectStore,
    settings: RetentionSettings,
    *,
    tier: Tier,
    partition: str,
    lock_timeout_ms: int,
    drop: Callable[[], Awaitable[None]],
) -> Archived:
    """Export ``partition`` of ``tier``, verify and record the object, then ``drop()`` it: all
    in one transaction (module docstring). On any failure the partition stays."""
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {lock_timeout_ms}")
        await conn.execute(f"LOCK TABLE {ident(partition)} IN SHARE MODE")
        row = await conn.fetchrow(BOUNDS, partition)
        if row is None or row["bounds"] is None:
            raise ArchiveMismatchError(f"{partition} is not a time partition")
        lo, hi = (datetime.fromisoformat(b) for b in row["bounds"])
        key = archive_key(tier.table, partition, lo)
        if await conn.fetchval(RECORDED, key):
            raise ArchiveMismatchError(
                f"{key} is already recorded as an archive, yet {partition} still exists"
            )
        # An object no row records is a leftover of an attempt whose commit failed.
        await asyncio.to_thread(store.discard_unrecorded_archive, key)
        archived = await _export_and_record(
            conn, store, settings, tier=tier, source=partition, partition=partition, key=key,
            lo=lo, hi=hi,
        )
        try:
            await drop()
        except BaseException:
            await _discard(store, key)
            raise
    log.info("archived %s: %s (%d rows, %d bytes)", partition, key, archived.rows, archived.bytes)
    return archived


def default_archive_key(table: str, partition: str, cutoff: datetime) -> str:
    """Where the expired rows a round deletes from a DEFAULT partition go: one object per
    round that deletes some (``cutoff``: the round's; a suffix keeps two rounds with the same
    cutoff apart)."""
    return (
        f"{PREFIX}/{table}/default/{partition}_{cutoff.astimezone(UTC):%Y%m%dT%H%M%S}Z_"
        f"{uuid.uuid4().hex[:8]}.parquet"
    )


async def archive_then_delete(
    conn: Conn,
    store: ObjectStore,
    settings: RetentionSettings,
    *,
    tier: Tier,
    partition: str,
    where: str,
    args: Sequence[Any],
    cutoff: datetime,
    lock_timeout_ms: int,
) -> Archived | None:
    """Delete the rows of the DEFAULT ``partition`` of ``tier`` matching ``where`` (with
    ``args``) and archive them, in one transaction: they move into a temporary table, which
    is exported, verified and recorded like a partition (the record's range ends at
    ``cutoff``). ``None`` when no row matched. On any failure the rows stay."""
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {lock_timeout_ms}")
        moved = f"tideway_archive_rows_{uuid.uuid4().hex[:12]}"
        await conn.execute(
            f"CREATE TEMP TABLE {moved} (LIKE {ident(partition)}) ON COMMIT DROP"
        )
        await conn.execute(
            f"WITH gone AS (DELETE FROM {ident(partition)} WHERE {where} RETURNING *) "
            f"INSERT INTO {moved} SELECT * FROM gone",
            *args,
        )
        rows = int(await conn.fetchval(f"SELECT count(*) FROM {moved}"))
        if not rows:
            return None
        lo = await conn.fetchval(f"SELECT min({ident(tier.column)}) FROM {moved}")
        key = default_archive_key(tier.table, partition, cutoff)
        archived = await _export_and_record(
            conn, store, settings, tier=tier, source=moved, partition=partition, key=key,
            lo=lo, hi=cutoff,
        )
    log.info("archived %d expired rows of %s: %s", rows, partition, key)
    return archived


async def _export_and_record(
    conn: Conn,
    store: ObjectStore,
    settings: RetentionSettings,
    *,
    tier: Tier,
    source: str,
    partition: str,
    key: str,
    lo: datetime,
    hi: datetime,
) -> Archived:
    """Export the rows of ``source`` (the partition itself, or a temporary table of its rows)
    to ``key``, verify the object holds every one of them and record it as ``partition``'s
    archive of ``[lo, hi)``. On a failure after the export the object is removed again."""
    archived, _ = await export(
        conn,
        store,
        table=tier.table,
        partition=source,
        key=key,
        metadata={
            "tideway.table": tier.table,
            "tideway.partition": partition,
            "tideway.range": f"[{lo.isoformat()}, {hi.isoformat()})",
        },
        batch_rows=settings.archive_batch_rows,
    )
    try:
        rows = int(await conn.fetchval(f"SELECT count(*) FROM {ident(source)}"))
        await asyncio.to_thread(verify, store, archived, rows)
        await conn.execute(
            RECORD,
            tier.name,
            tier.table,
            partition,
            lo,
            hi,
            archived.key,
            archived.sha256,
            archived.bytes,
            archived.rows,
            archived.message_id_min,
            archived.message_id_max,
        )
    except BaseException:
        await _discard(store, key)
        raise
    return archived


async def _discard(store: ObjectStore, key: str) -> None:
    """Remove the object of an archive that will not be recorded; a failure here is only
    logged (the original error matters more; the next attempt removes it first)."""
    try:
        await asyncio.to_thread(store.discard_unrecorded_archive, key)
    except Exception as exc:
        log.warning("could not remove the unrecorded archive %s: %s", key, exc)


# -- expiry ---------------------------------------------------------------------------------

ARCHIVES = "archives"
"""The retention plan's tier of archives past ``retention.archives_s``."""

EXPIRED = """
SELECT object_key, range_hi, bytes, rows FROM retention_archives
WHERE range_hi + make_interval(secs => $1) <= $2
ORDER BY range_hi, id
"""

FORGET = "DELETE FROM retention_archives WHERE object_key = $1"


async def plan_items(conn: Conn, settings: RetentionSettings, now: datetime) -> list[PlanItem]:
    """The archives a run removes now (none while ``retention.archives_s`` is unset); the
    others are summed up by :func:`totals`."""
    if settings.archives_s is None:
        return []
    return [
        PlanItem(
            tier=ARCHIVES,
            target=r["object_key"],
            expires_at=r["range_hi"] + timedelta(seconds=settings.archives_s),
            action=DROP,
            bytes=r["bytes"],
            rows=r["rows"],
        )
        for r in await conn.fetch(EXPIRED, settings.archives_s, now)
    ]


async def remove_expired(
    conn: Conn, store: ObjectStore, items: Sequence[PlanItem]
) -> tuple[list[PlanItem], list[tuple[str, str]]]:
    """Remove the expired archives of ``items`` (object, then its row); returns (done,
    skipped): an object the store cannot remove now keeps its row for the next round."""
    done, skipped = [], []
    for item in items:
        if item.tier != ARCHIVES or item.action != DROP:
            continue
        try:
            await asyncio.to_thread(store.remove_expired_archive, item.target)
        except TransientError as exc:
            log.warning("could not remove the expired archive %s: %s", item.target, exc)
            skipped.append((item.target, f"{exc.code}: {exc}"))
            continue
        await conn.execute(FORGET, item.target)
        log.info("removed the expired archive %s (%d rows)", item.target, item.rows or 0)
        done.append(item)
    return done, skipped


async def totals(conn: Conn) -> tuple[int, int]:
    """(objects, bytes) of the archives recorded."""
    row = await conn.fetchrow(TOTALS)
    assert row is not None  # an aggregate always returns its row
    return int(row["objects"]), int(row["bytes"])
