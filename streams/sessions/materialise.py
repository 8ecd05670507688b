"""materialise_clickhouse: load a run's query datasets from Parquet into ClickHouse, idempotently.

Theory of operation
-------------------
Parquet on the object store is canonical; ClickHouse is a cache for interactive reads
(spec 000 §4.1 stage 5). Each materialised dataset name ``<name>`` has one ClickHouse table
``session_<name>`` (lower case) whose columns are the dataset's own plus four keys::

    tenant LowCardinality(String), session_id UUID, run_id UUID, row_no UInt64

``row_no`` is the row's position in the Parquet file, so ``(run_id, row_no)`` identifies a row.
Loading is idempotent per ``(table, run_id)``: when the table already holds exactly the
dataset's row count for the run nothing is written; when it holds some other count (an earlier
attempt died mid-insert) those rows are deleted first; then the dataset is inserted. Running the
job twice therefore leaves one copy. The tables are ``ReplacingMergeTree`` on
``(session_id, run_id, row_no)`` as a second line of defence: should two attempts ever insert
concurrently (a job reaped while its first attempt still runs), merges collapse the duplicate
rows and ``FINAL`` reads see one copy. A row per loaded dataset goes to
``session_materialisations`` (ReplacingMergeTree on ``(run_id, dataset)``) as the
materialisation record.
The tables have no TTL: a run's rows are deleted together with its datasets when retention
removes a superseded run (``streams.retention.batch``).

Not everything is loaded: the raw level (``*_L0``) and the pre-downsample canonical streams
(``gnss``, ``imu``, ``aux``, recorded as ``<job>.<stream>``) stay Parquet-only; every other
dataset of the run is materialised.
Tables are created on first use from the Arrow schema; a later schema that adds columns adds
them (``ADD COLUMN IF NOT EXISTS``), a conflicting type fails the job with a stable code.

With the embedded engine (chDB) and a store on the local file system, the engine reads each
verified Parquet file itself (``INSERT ... SELECT ... FROM file(...)``, ``row_no`` from the
file's ``_row_number``): decoding the file into Arrow here and handing it over again cost twice
as much (the ``fused`` dataset of a 60-minute session, 353,000 rows × 12 columns, median of 8
alternations: 0.43 s through Arrow, 0.22 s read by the engine, with the same rows, keys and row
numbers). The file is verified against its sha256 first, as every dataset read is; datasets are
immutable, so the verified file is the file the engine reads. A server (``http(s)://``) or a
remote store gets the Arrow table.

Cost (bench/session.py, a 60-minute session: 15 datasets, ``fused`` 360,000 rows): the columns
of every table and the run's row count in each are asked once for the whole run (two queries,
not two per dataset), and the inserts run with ``optimize_on_insert = 0``: that setting merges
each inserted block as a ReplacingMergeTree merge would, which finds nothing to collapse here
(``row_no`` is unique within a dataset's rows) and cost ~40 % of the ``fused`` insert (min of 5
inserts into chDB: 0.33 s with it, 0.20 s without). Duplicates from two concurrent attempts are
still collapsed by merges and ``FINAL``, as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from streams.clickhouse import ClickHouse, ident
from streams.errors import PermanentError
from streams.jobs.executor import Executor, JobContext
from streams.jobs.model import JobResult
from streams.objects import ObjectStore
from streams.sessions.datasets import DatasetFile, idempotency_key, read_table
from streams.sessions.executor_resources import ExecutorResources

__all__ = [
    "RECORD_TABLE",
    "RUN_ROWS",
    "clickhouse_type",
    "is_materialised",
    "materialise_executor",
    "materialise_run",
    "table_name",
]

RECORD_TABLE = "session_materialisations"
_PARQUET_ONLY = frozenset({"gnss", "imu", "aux"})
_KEYS = ("tenant", "session_id", "run_id", "row_no")
_KEY_DDL = "tenant LowCardinality(String), session_id UUID, run_id UUID, row_no UInt64"
# See the module docstring: nothing in one dataset's block for the replacing merge to collapse.
_INSERT_SETTINGS = {"optimize_on_insert": 0}


def is_materialised(name: str) -> bool:
    """Whether dataset ``name`` is loaded into ClickHouse (see the module docstring)."""
    return "." not in name and name not in _PARQUET_ONLY and not name.endswith("_L0")


def table_name(dataset: str) -> str:
    """The ClickHouse table of dataset ``dataset``."""
    return ident(f"session_{dataset.lower()}")


def clickhouse_type(field: pa.Field) -> str:
    """The ClickHouse column type for an Arrow field (Nullable when the field is)."""
    base = _base_type(field.type)
    if field.nullable and not base.startswith(("Array", "LowCardinality")):
        return f"Nullable({base})"
    if field.nullable and base == "LowCardinality(String)":
        return "LowCardinality(Nullable(String))"
    return base


def _base_type(t: pa.DataType) -> str:
    simple = {
        pa.float64(): "Float64",
        pa.float32(): "Float32",
        pa.int8(): "Int8",
        pa.int16(): "Int16",
        pa.int32(): "Int32",
        pa.int64(): "Int64",
        pa.uint8(): "UInt8",
        pa.uint16(): "UInt16",
        pa.uint32(): "UInt32",
        pa.uint64(): "UInt64",
        pa.bool_(): "Bool",
        pa.string(): "String",
        pa.large_string(): "String",
        pa.date32(): "Date32",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        precision = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
        return f"DateTime64({precision}, 'UTC')"
    if pa.types.is_dictionary(t) and pa.types.is_string(t.value_type):
        return "LowCardinality(String)"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"Array({_base_type(t.value_type)})"
    raise PermanentError(f"no ClickHouse type for Arrow {t}", code="MATERIALISE_UNSUPPORTED_TYPE")


def _create_ddl(database: str, table: str, schema: pa.Schema) -> str:
    cols = [f"`{ident(f.name)}` {clickhouse_type(f)}" for f in schema if f.name not in _KEYS]
    return (
        f"CREATE TABLE IF NOT EXISTS {database}.{table} ({_KEY_DDL}"
        + "".join(", " + c for c in cols)
        + ") ENGINE = ReplacingMergeTree ORDER BY (session_id, run_id, row_no)"
    )


async def _existing_columns(ch: ClickHouse, tables: Sequence[str]) -> dict[str, dict[str, str]]:
    """Column name -> type of each of ``tables`` that exists (one query for all of them)."""
    if not tables:
        return {}
    rows = await ch.query_rows(
        "SELECT table, name, type FROM system.columns"
        " WHERE database = {db:String} AND has({tables:Array(String)}, table)",
        {"db": ch.database, "tables": list(tables)},
    )
    found: dict[str, dict[str, str]] = {}
    for table, name, typ in rows:
        found.setdefault(str(table), {})[str(name)] = str(typ)
    return found


async def _ensure_table(
    ch: ClickHouse, table: str, schema: pa.Schema, existing: Mapping[str, str] | None
) -> None:
    """Create ``table`` for ``schema`` (``existing``: its columns, ``None`` if it has none yet)
    or add the columns it lacks; a column of another type is a conflict."""
    if not existing:
        await ch.command(_create_ddl(ch.database, table, schema))
        existing = dict(
            await ch.query_rows(
                "SELECT name, type FROM system.columns"
                " WHERE database = {db:String} AND table = {t:String}",
                {"db": ch.database, "t": table},
            )
        )
    for f in schema:
        if f.name in _KEYS:
            continue
        want = clickhouse_type(f)
        have = existing.get(f.name)
        if have is None:
            await ch.command(
                f"ALTER TABLE {ch.database}.{table} ADD COLUMN IF NOT EXISTS `{f.name}` {want}"
            )
        elif have != want:
            raise PermanentError(
                f"{table}.{f.name} is {have} in ClickHouse but {want} in the dataset",
                code="MATERIALISE_SCHEMA_CONFLICT",
            )


# A run's rows, by the prefix of the tables' primary key (session_id, run_id, row_no), so the
# index finds them however many sessions a table holds (on run_id alone ClickHouse can only
# exclude granules where the session does not change).
RUN_ROWS = "session_id = {session:UUID} AND run_id = {run:UUID}"


async def _present_rows(
    ch: ClickHouse, tables: Sequence[str], *, session_id: str, run_id: str
) -> dict[str, int]:
    """The run's rows in each of ``tables`` (existing ones), in one round trip."""
    if not tables:
        return {}
    union = " UNION ALL ".join(
        f"SELECT '{t}', count() FROM {ch.database}.{t} WHERE {RUN_ROWS}" for t in tables
    )
    rows = await ch.query_rows(union, {"session": session_id, "run": run_id})
    return {str(t): int(n) for t, n in rows}


async def _ensure_record_table(ch: ClickHouse) -> None:
    await ch.command(
        f"CREATE TABLE IF NOT EXISTS {ch.database}.{RECORD_TABLE} ("
        "tenant LowCardinality(String), session_id UUID, run_id UUID, dataset String, "
        "table String, rows UInt64, content_hash String, schema_version String, "
        "loaded_at DateTime64(3, 'UTC') DEFAULT now64(3)"
        ") ENGINE = ReplacingMergeTree(loaded_at) ORDER BY (run_id, dataset)"
    )


def _with_keys(table: pa.Table, *, tenant: str, session_id: str, run_id: str) -> pa.Table:
    n = table.num_rows
    zeros = pa.array(np.zeros(n, dtype=np.int32))

    def constant(value: str) -> pa.DictionaryArray:
        # One dictionary entry: ClickHouse parses the string (a UUID) once, not once per row.
        return pa.DictionaryArray.from_arrays(zeros, pa.array([value], pa.string()))

    keys = {
        "tenant": constant(tenant),
        "session_id": constant(session_id),
        "run_id": constant(run_id),
        "row_no": pa.array(np.arange(n, dtype=np.uint64)),
    }
    data = table.drop_columns([c for c in _KEYS if c in table.column_names])
    for i, (name, arr) in enumerate(keys.items()):
        data = data.add_column(i, name, arr)
    return data


@dataclass(frozen=True)
class _Source:
    """A dataset ready to load: in memory (``table``) or a verified local Parquet file the
    embedded engine reads itself (``path``)."""

    schema: pa.Schema
    rows: int
    table: pa.Table | None = None
    path: str | None = None


def _open(store: ObjectStore, ds: DatasetFile, *, direct: bool) -> _Source:
    key = store.key(ds.url)
    path = store.local_path(key) if direct else None
    if path is None:
        data = read_table(store, ds.url, sha256=ds.sha256)
        return _Source(schema=data.schema, rows=data.num_rows, table=data)
    store.verify(key, sha256=ds.sha256)
    meta = pq.ParquetFile(path)
    return _Source(schema=meta.schema_arrow, rows=meta.metadata.num_rows, path=path)


async def _read(store: ObjectStore, ds: DatasetFile, *, direct: bool) -> tuple[_Source, float]:
    started = time.perf_counter()
    source = await asyncio.to_thread(_open, store, ds, direct=direct)
    return source, time.perf_counter() - started


async def _insert(
    ch: ClickHouse, table: str, source: _Source, *, tenant: str, session_id: str, run_id: str
) -> None:
    if source.table is not None:
        await ch.insert_arrow(
            table,
            _with_keys(source.table, tenant=tenant, session_id=session_id, run_id=run_id),
            settings=_INSERT_SETTINGS,
        )
        return
    if not source.rows:
        return
    fields = [f for f in source.schema if f.name not in _KEYS]
    columns = "".join(f", `{ident(f.name)}`" for f in fields)
    # The file's columns are read as the table's types (the DDL's own mapping), not inferred.
    structure = ", ".join(f"`{ident(f.name)}` {clickhouse_type(f)}" for f in fields)
    settings = "".join(f", {k} = {v}" for k, v in _INSERT_SETTINGS.items()).lstrip(", ")
    await ch.command(
        f"INSERT INTO {ch.database}.{table} ({', '.join(_KEYS)}{columns}) "
        f"SELECT {{tenant:String}}, {{session:UUID}}, {{run:UUID}}, _row_number{columns} "
        f"FROM file({{path:String}}, 'Parquet', {{structure:String}}) SETTINGS {settings}",
        {"tenant": tenant, "session": session_id, "run": run_id, "path": source.path,
         "structure": structure},
    )  # fmt: skip


async def _load_one(
    ch: ClickHouse,
    ds: DatasetFile,
    read: asyncio.Task[tuple[_Source, float]],
    *,
    columns: Mapping[str, str] | None,
    present: int,
    tenant: str,
    session_id: str,
    run_id: str,
) -> dict[str, Any]:
    """Load one dataset; ``columns`` and ``present`` are what its table held when the job
    looked (its columns, ``None`` when it did not exist; the run's rows in it)."""
    table = table_name(ds.name)
    started = time.perf_counter()
    source, read_s = await read
    waited_s = time.perf_counter() - started
    await _ensure_table(ch, table, source.schema, columns)
    ddl_s = time.perf_counter() - started - waited_s
    action = "skipped"
    if present != source.rows:
        if present:
            await ch.command(f"DELETE FROM {ch.database}.{table} WHERE {RUN_ROWS}",
                             {"session": session_id, "run": run_id})  # fmt: skip
        await _insert(ch, table, source, tenant=tenant, session_id=session_id, run_id=run_id)
        action = "reloaded" if present else "inserted"
    return {
        "dataset": ds.name,
        "table": table,
        "rows": source.rows,
        "content_hash": ds.sha256,
        "schema_version": ds.schema_version,
        "action": action,
        "read_s": round(read_s, 4),
        "ddl_s": round(ddl_s, 4),
        "seconds": round(time.perf_counter() - started, 4),
    }


async def materialise_run(
    ch: ClickHouse,
    store: ObjectStore,
    *,
    tenant: str,
    session_id: str,
    run_id: str,
    datasets: Iterable[DatasetFile],
) -> Mapping[str, Any]:
    """Load every materialised dataset of a run; returns the job summary (tables, rows)."""
    chosen = sorted((d for d in datasets if is_materialised(d.name)), key=lambda d: d.name)
    loaded: list[dict[str, Any]] = []
    # Read (and verify) the next Parquet file while the current one is being inserted; the
    # first one is read while the tables are looked at.
    direct = ch.embedded
    reads = [asyncio.create_task(_read(store, chosen[0], direct=direct))] if chosen else []
    try:
        await ch.ensure_database()
        await _ensure_record_table(ch)
        tables = [table_name(d.name) for d in chosen]
        columns = await _existing_columns(ch, tables)
        present = await _present_rows(
            ch, [t for t in tables if t in columns], session_id=session_id, run_id=run_id
        )
        for i, ds in enumerate(chosen):
            if i + 1 < len(chosen):
                reads.append(asyncio.create_task(_read(store, chosen[i + 1], direct=direct)))
            table = table_name(ds.name)
            loaded.append(
                await _load_one(
                    ch,
                    ds,
                    reads[i],
                    columns=columns.get(table),
                    present=present.get(table, 0),
                    tenant=tenant,
                    session_id=session_id,
                    run_id=run_id,
                )
            )
    finally:
        for task in reads:
            task.cancel()
    await _record(ch, loaded, tenant=tenant, session_id=session_id, run_id=run_id)
    return {
        "database": ch.database,
        "tables": {e["table"]: e["rows"] for e in loaded},
        "loaded": loaded,
    }


async def _record(
    ch: ClickHouse,
    loaded: Sequence[Mapping[str, Any]],
    *,
    tenant: str,
    session_id: str,
    run_id: str,
) -> None:
    if not loaded:
        return
    await ch.insert_rows(
        RECORD_TABLE,
        [
            [
                tenant,
                session_id,
                run_id,
                e["dataset"],
                e["table"],
                e["rows"],
                e["content_hash"],
                e["schema_version"],
            ]
            for e in loaded
        ],
        column_names=[
            "tenant",
            "session_id",
            "run_id",
            "dataset",
            "table",
            "rows",
            "content_hash",
            "schema_version",
        ],
    )


def materialise_executor(executors: ExecutorResources) -> Executor:
    """The ``materialise_clickhouse`` executor: every upstream dataset of the run, loaded."""
    settings = executors.settings

    async def execute(ctx: JobContext, /) -> JobResult:
        ctx.checkpoint()
        pool = await executors.db()
        tenant = await pool.fetchval("SELECT name FROM tenants WHERE id = $1", ctx.job.tenant_id)
        datasets = [
            DatasetFile(
                name=d.name,
                url=d.storage_url,
                sha256=d.content_hash,
                size=0,
                rows=d.row_count or 0,
                schema_version=d.schema_version,
            )
            for d in ctx.datasets.values()
        ]
        ch = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
        summary = await materialise_run(
            ch,
            executors.store,
            tenant=str(tenant),
            session_id=str(ctx.session_id),
            run_id=str(ctx.job.run_id),
            datasets=datasets,
        )
        key = idempotency_key(
            run_id=str(ctx.job.run_id),
            job_type=ctx.job.name,
            input_hashes=ctx.input_hashes,
            config={"database": ch.database},
            versions=ctx.versions.as_json(),
        )
        return JobResult(summary=summary, idempotency_key=key)

    return execute
