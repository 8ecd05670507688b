"""Archived rows back within reach of the statements that explain a message.

``tideway messages show`` explains an envelope with a handful of statements on
``ingestion_messages``, the stage logs (the ``ingestion_stage_logs`` view over
``ingestion_stage_passes``) and ``device_telemetry_logs``. Once retention has dropped the
partitions holding its rows, those rows live only in the Parquet archives
(:mod:`streams.retention.archive`). Rather than a second explanation written against Parquet,
:func:`restored` puts them back where the same statements look:

* it opens a connection of its own and creates **temporary tables** named like the archived
  tables (``LIKE`` the current ones): ``pg_temp`` is searched first, so every unqualified
  statement on that connection reads them;
* it recreates, as temporary views, the views that read those tables (their definitions taken
  from the catalogue before the temporary tables exist, so they bind to the temporary ones);
* it fills each temporary table with the message's live rows, then with its archived rows not
  already there (by the table's primary key, or the whole row): the objects to read are picked
  from ``retention_archives`` by the message id range each object records, newest first, and
  read with a Parquet filter (row groups whose statistics exclude the id are skipped);
* archived values go back through ``jsonb_populate_recordset``, so Postgres converts each
  value with its own input function into the column's current type, whatever the columns are.

A message found only by its dedupe key (the key is forgotten with its dedupe generation, long
before an archived message's records) is searched for in the archives of
``ingestion_messages``, newest first, by ``source_deduplication_key``.

Limits: duplicates of an archived message are found in the objects that can hold the message
itself (and live), not in later days' objects; rows are restored into the *current* layout,
so a column the layout no longer has is left out, and a column it gained is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.ingest.ingress import digest_of, key_hash
from streams.adapters import postgres
from streams.adapters.postgres import Connection
from streams.objects import ObjectStore
from streams.retention.archive import MESSAGE_ID_BOUNDS
from streams.retention.sql import ident

log = logging.getLogger(__name__)

TABLES = tuple(MESSAGE_ID_BOUNDS)
KEY_COLUMN = "source_deduplication_key"

# -- statements -------------------------------------------------------------------------------

# The views that read any of the tables ($1), with their definitions.
VIEWS = """
SELECT DISTINCT v.relname AS name, pg_get_viewdef(v.oid) AS definition
FROM pg_depend d
JOIN pg_rewrite r ON r.oid = d.objid
JOIN pg_class v ON v.oid = r.ev_class
WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
  AND d.refobjid IN (SELECT to_regclass(t) FROM unnest($1::text[]) AS t)
  AND v.relkind = 'v' AND v.oid <> d.refobjid
"""

# A table's primary key columns.
PRIMARY_KEY = """
SELECT a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = $1::regclass AND i.indisprimary
ORDER BY a.attnum
"""

# The objects of a table that can hold message $2, newest first.
CANDIDATES = """
SELECT object_key FROM retention_archives
WHERE parent_table = $1
  AND (message_id_min IS NULL OR $2::bigint BETWEEN message_id_min AND message_id_max)
ORDER BY range_lo DESC, id DESC
"""

ANY = "SELECT EXISTS (SELECT 1 FROM retention_archives)"

ALL_OF = """
SELECT object_key FROM retention_archives WHERE parent_table = $1 ORDER BY range_lo DESC, id DESC
"""


async def any_archive(conn: postgres.Conn) -> bool:
    """Whether any partition was archived (else there is nothing to restore from)."""
    return bool(await conn.fetchval(ANY))


@dataclass(frozen=True, kw_only=True)
class Found:
    """A connection on which the archived tables' names hold one message's rows."""

    conn: Connection
    message_id: int
    archives: dict[str, list[str]] = field(default_factory=dict)
    """Per table, the archive objects rows were restored from."""


# -- reading the archives (blocking: run in a thread) -----------------------------------------


Match = tuple[str, str, Any]
"""``(low, high, value)``: the rows whose ``low`` column is at most ``value`` and whose
``high`` column at least (``low == high``: the rows where that column equals it)."""


def _read(store: ObjectStore, key: str, match: Sequence[Match]) -> pa.Table:
    """The rows of the object at ``key`` where any of ``match`` holds; a column the object
    lacks (another layout) is left out, and when it lacks the first's, no row matches."""
    with store.open_input_file(key) as f:
        names = pq.ParquetFile(f, page_checksum_verification=True).schema_arrow.names
        present = [m for m in match if m[0] in names and m[1] in names]
        if not present or present[0] != match[0]:
            return pa.table({})
        where: pc.Expression | None = None
        for low, high, value in present:
            holds = (
                pc.field(low) == value
                if low == high
                else (pc.field(low) <= value) & (pc.field(high) >= value)
            )
            where = holds if where is None else where | holds
        f.seek(0)
        return pq.read_table(f, filters=where, page_checksum_verification=True)


def _plain(value: Any, pg_type: str) -> Any:
    """An archived value as JSON that Postgres's input function for the column turns back into
    the value: bytes as ``\\x`` hex, json and jsonb as the document itself."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, list):
        return [_plain(v, pg_type) for v in value]
    if pg_type in ("json", "jsonb") and isinstance(value, str):
        return orjson.loads(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return value


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    types = {f.name: (f.metadata or {}).get(b"pg_type", b"").decode() for f in table.schema}
    rows = [
        {name: _plain(value, types[name]) for name, value in row.items()}
        for row in table.to_pylist()
    ]
    if types.get(KEY_COLUMN) == "text":
        # Archived before migration 0020: the key's text, where the row now holds its digest.
        for row in rows:
            if row[KEY_COLUMN] is not None:
                row[KEY_COLUMN] = key_hash(row[KEY_COLUMN])
    return rows


# -- the connection ---------------------------------------------------------------------------


async def _find_by_key(conn: Connection, store: ObjectStore, key: str) -> int | None:
    """The id of the archived message with dedupe key ``key`` (newest archive first). The
    column holds the key's digest (a ``uuid``, archived as its text) since migration 0020,
    the key's text in older archives."""
    digest = str(uuid.UUID(digest_of(key)))  # the key's, or the digest itself
    for r in await conn.fetch(ALL_OF, "ingestion_messages"):
        hit = await asyncio.to_thread(
            _read, store, r["object_key"],
            [(KEY_COLUMN, KEY_COLUMN, digest), (KEY_COLUMN, KEY_COLUMN, key)],
        )
        if hit.num_rows and "id" in hit.column_names:
            return int(hit.column("id")[0].as_py())
    return None


async def _restore(
    conn: Connection, store: ObjectStore, schema: str, table: str, message_id: int
) -> list[str]:
    """Fill the temporary ``table`` with the message's live rows, then its archived rows not
    already there; returns the objects rows came from."""
    low, high = MESSAGE_ID_BOUNDS[table]
    # A row of many messages (a transaction's stage passes) comes whole: the views pick the
    # message's part.
    live_where = (
        f"{ident(low)} = $1" if low == high else f"{ident(low)} <= $1 AND {ident(high)} >= $1"
    )
    match: list[Match] = [(low, high, message_id)]
    if table == "ingestion_messages":  # its duplicates too (they name it as their owner)
        live_where += " OR duplicate_of = $1"
        match.append(("duplicate_of", "duplicate_of", message_id))
    await conn.execute(
        f"CREATE TEMP TABLE {ident(table)} (LIKE {ident(schema)}.{ident(table)} INCLUDING DEFAULTS)"
    )
    await conn.execute(
        f"INSERT INTO pg_temp.{ident(table)} "
        f"SELECT * FROM {ident(schema)}.{ident(table)} WHERE {live_where}",
        message_id,
    )
    keys = [r[0] for r in await conn.fetch(PRIMARY_KEY, f"{ident(schema)}.{ident(table)}")]
    same = (
        " AND ".join(f"x.{ident(k)} IS NOT DISTINCT FROM r.{ident(k)}" for k in keys)
        if keys
        else "x::text = r::text"
    )
    insert = (
        f"INSERT INTO pg_temp.{ident(table)} SELECT r.* FROM "
        f"jsonb_populate_recordset(NULL::pg_temp.{ident(table)}, $1::jsonb) AS r "
        f"WHERE NOT EXISTS (SELECT 1 FROM pg_temp.{ident(table)} AS x WHERE {same})"
    )
    used = []
    for r in await conn.fetch(CANDIDATES, table, message_id):
        found = await asyncio.to_thread(_read, store, r["object_key"], match)
        if found.num_rows:
            await conn.execute(insert, _rows(found))
            used.append(r["object_key"])
    return used


@contextlib.asynccontextmanager
async def restored(
    dsn: str, store: ObjectStore, *, message_id: int | None, key: str | None = None
) -> AsyncIterator[Found | None]:
    """A connection whose ``ingestion_messages``, ``ingestion_stage_passes``,
    ``device_telemetry_logs`` (and the views over them) hold one message's live and archived
    rows (module docstring). ``None`` when no archive holds a row of the message (or, by
    ``key``, no archived message has that key)."""
    conn = await postgres.connect(dsn)
    try:
        if message_id is None:
            message_id = await _find_by_key(conn, store, key) if key else None
            if message_id is None:
                yield None
                return
        schema = await conn.fetchval("SELECT current_schema()")
        views = await conn.fetch(VIEWS, [f"{ident(schema)}.{ident(t)}" for t in TABLES])
        archives: dict[str, list[str]] = {}
        async with conn.transaction():
            for table in TABLES:
                used = await _restore(conn, store, schema, table, message_id)
                if used:
                    archives[table] = used
            for view in views:
                definition = view["definition"].strip().rstrip(";")
                await conn.execute(f"CREATE TEMP VIEW {ident(view['name'])} AS {definition}")
        yield Found(conn=conn, message_id=message_id, archives=archives) if archives else None
    finally:
        await conn.close()
