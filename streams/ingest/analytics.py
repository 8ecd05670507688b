"""ClickHouse analytics: one row per final parameter value of every completed envelope.

The table is a ``ReplacingMergeTree`` whose sorting key ends in the envelope's dedupe key
and the parameter name, so a value published twice — a redelivery after a crash between
publish and the Postgres commit, a replay, a redrive — collapses to one row. Readers that
need exact counts before ClickHouse has merged use ``FINAL`` (``messages show`` does).
Missing values (``null``) make no row. Numbers, integers and booleans (as 0/1) go to
``value``; strings to ``value_text``. Its TTL (from ``retention.clickhouse_telemetry_s``) is
applied by :mod:`streams.retention.ttl`, which also says why it is partitioned by month.

The consumer sends one row per *envelope* — its values as the JSON it already encoded for
Postgres and Redis — into a ``Null`` table, and a materialized view explodes each into one row
per parameter inside ClickHouse. That keeps the per-value work out of the Python event loop;
the insert itself runs in a worker thread that releases the GIL. Each row also carries its
schema's units as two parallel arrays (parameter names, units), which the view indexes: looking
each unit up in a JSON object instead cost ClickHouse about 2 µs more per envelope.

Inserts are group-committed: while one insert runs, the batches that arrive wait and then go
together in the next one. ClickHouse pays a fixed cost per insert (a new part, later merged),
so under load this cuts its work several-fold, and each batch still returns only once its own
rows are in. When a shared insert fails, its batches are retried one by one, so one batch's
problem cannot fail the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from stages.ingest.evaluate import Evaluation, TopicBinding
from streams.clickhouse import ClickHouse, ident

VALUES_DDL = """
CREATE TABLE IF NOT EXISTS {db}.{table} (
    tenant LowCardinality(String),
    device LowCardinality(String),
    topic LowCardinality(String),
    parameter LowCardinality(String),
    measured_at DateTime64(6, 'UTC'),
    value Nullable(Float64),
    value_text Nullable(String),
    unit LowCardinality(String),
    message_key String,
    schema_version_id UUID,
    received_at DateTime64(6, 'UTC'),
    published_at DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = ReplacingMergeTree(published_at)
PARTITION BY toYYYYMM(measured_at)
ORDER BY (tenant, device, topic, parameter, measured_at, message_key)
SETTINGS merge_selector_base = 10
"""
"""``merge_selector_base = 10`` (default 5): merge in wider steps, so each row is rewritten
fewer times on its way into a big part. This table takes a steady stream of mid-sized inserts;
measured over 240,000 envelopes, it cut ClickHouse's CPU per envelope by a fifth (insert plus
merges) at the price of about ten active parts instead of five."""

ENVELOPES_DDL = """
CREATE TABLE IF NOT EXISTS {db}.{input} (
    tenant String,
    device String,
    topic String,
    measured_at DateTime64(6, 'UTC'),
    message_key String,
    schema_version_id UUID,
    received_at DateTime64(6, 'UTC'),
    values_json String,
    unit_names Array(String),
    unit_values Array(String)
) ENGINE = Null
"""

EXPLODE_DDL = """
CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{view} TO {db}.{table} AS
SELECT tenant, device, topic, kv.1 AS parameter, measured_at,
       multiIf(kv.2 = 'true', 1., kv.2 = 'false', 0., toFloat64OrNull(kv.2)) AS value,
       if(startsWith(kv.2, '"'), JSONExtractString(concat('[', kv.2, ']'), 1), NULL)
           AS value_text,
       unit_values[indexOf(unit_names, kv.1)] AS unit,
       message_key, schema_version_id, received_at
FROM {db}.{input}
ARRAY JOIN JSONExtractKeysAndValuesRaw(values_json) AS kv
WHERE kv.2 != 'null'
"""

# Skip the per-insert dedupe pass: the table deduplicates on merge and readers that need exact
# counts use ``FINAL`` anyway, while that pass cost about a quarter of ClickHouse's CPU per insert.
INSERT_SETTINGS = {"optimize_on_insert": 0}

_TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("tenant", pa.string()), ("device", pa.string()), ("topic", pa.string()),
    ("measured_at", _TS), ("message_key", pa.string()), ("schema_version_id", pa.string()),
    ("received_at", _TS), ("values_json", pa.string()),
    ("unit_names", pa.list_(pa.string())), ("unit_values", pa.list_(pa.string())),
])


class Analytics:
    """The analytics sink for one ClickHouse database and table."""

    def __init__(self, clickhouse: ClickHouse, table: str) -> None:
        self.clickhouse = clickhouse
        self.table = ident(table)
        self.input = ident(f"{table}_in")
        self.view = ident(f"{table}_explode")
        self._waiting: list[tuple[pa.Table, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.inserts = 0
        """Inserts sent to ClickHouse so far (group commits count once)."""

    async def ensure(self) -> None:
        """Create the database, tables and view if they do not exist (idempotent).

        An input table of an earlier shape (units as one JSON column) is replaced together
        with its view; both hold no data (a ``Null`` table and the view feeding the values
        table), so nothing is lost. A consumer of the old version still running fails its
        inserts from then on: its envelopes are redelivered, and past the delivery budget
        recorded ``failed_terminal`` with a dead letter (``tideway dlq redrive`` publishes
        them again), so upgrade every consumer together with ``tideway streams init``.
        """
        await self.clickhouse.ensure_database()
        db = self.clickhouse.database
        if await self._input_is_outdated():
            await self.clickhouse.command(f"DROP VIEW IF EXISTS {db}.{self.view}")
            await self.clickhouse.command(f"DROP TABLE IF EXISTS {db}.{self.input}")
        for ddl in (VALUES_DDL, ENVELOPES_DDL, EXPLODE_DDL):
            await self.clickhouse.command(
                ddl.format(db=db, table=self.table, input=self.input, view=self.view))

    async def _input_is_outdated(self) -> bool:
        """Whether the input table exists with other columns than :data:`SCHEMA`'s."""
        rows = await self.clickhouse.query_rows(
            "SELECT name FROM system.columns WHERE database = {db:String} AND table = {t:String}",
            {"db": self.clickhouse.database, "t": self.input},
        )
        return bool(rows) and {r[0] for r in rows} != set(SCHEMA.names)

    @staticmethod
    def rows(evaluations: Sequence[Evaluation]) -> pa.Table:
        """One input row per completed envelope (the view makes the per-parameter rows)."""
        evs = evaluations
        parts = [ev.parts for ev in evs]
        envelopes = [ev.envelope for ev in evs]
        bindings = [ev.binding for ev in evs]
        # The units are the same for every envelope of a binding: one list per distinct
        # binding, repeated by index in Arrow (not rebuilt per envelope in Python).
        slots: dict[int, int] = {}
        distinct: list[TopicBinding] = []
        picks = []
        for b in bindings:
            slot = slots.get(id(b))
            if slot is None:
                slot = slots[id(b)] = len(distinct)
                distinct.append(b)  # type: ignore[arg-type]
            picks.append(slot)
        which = pa.array(picks, pa.int32())
        names = pa.array([b.unit_names for b in distinct], pa.list_(pa.string())).take(which)
        units = pa.array([b.unit_values for b in distinct], pa.list_(pa.string())).take(which)
        columns: list[list[Any]] = [
            [p.tenant for p in parts],  # type: ignore[union-attr]
            [p.device for p in parts],  # type: ignore[union-attr]
            [p.topic for p in parts],  # type: ignore[union-attr]
            [e.ts_us for e in envelopes],  # type: ignore[union-attr]
            [ev.key for ev in evs],
            [b.version_text for b in bindings],  # type: ignore[union-attr]
            [ev.receipt.received_at_ns // 1000 for ev in evs],
            [ev.values_json for ev in evs],
        ]
        types = SCHEMA.types[:-2]  # the last two are the unit arrays above
        arrays = [pa.array(column, type=t) for column, t in zip(columns, types, strict=True)]
        return pa.Table.from_arrays([*arrays, names, units], schema=SCHEMA)

    async def insert(self, rows: pa.Table) -> None:
        """Insert one batch's rows, possibly together with concurrent batches; returns when
        they are in (raises ``TransientError`` when ClickHouse fails)."""
        if not rows.num_rows:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((rows, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await done

    async def _flush(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting, []
            try:
                await self._send(pa.concat_tables([rows for rows, _ in group]))
            except Exception as exc:
                if len(group) == 1:
                    _settle(group[0][1], exc)
                    continue
                for rows, done in group:  # one batch's problem must not fail the others
                    try:
                        await self._send(rows)
                    except Exception as single:
                        _settle(done, single)
                    else:
                        _settle(done, None)
                continue
            for _, done in group:
                _settle(done, None)

    async def _send(self, rows: pa.Table) -> None:
        self.inserts += 1
        await self.clickhouse.insert_arrow(self.input, rows, INSERT_SETTINGS)

    async def withdraw(self, keys: Sequence[str]) -> None:
        """Delete the rows of the envelopes with these dedupe keys (a lightweight delete)."""
        if keys:
            await self.clickhouse.command(
                f"DELETE FROM {self.clickhouse.database}.{self.table} "
                "WHERE message_key IN {keys:Array(String)}",
                {"keys": list(keys)},
            )

    async def count_for(self, digest: str, *, tenant: str, device: str,
                        measured_at: datetime) -> int:
        """How many (deduplicated) rows hold values of the envelope whose dedupe key has the
        digest ``digest`` (:func:`stages.ingest.ingress.key_hash`: Postgres keeps only the
        digest since migration 0020), measured at ``measured_at`` by ``device`` of
        ``tenant`` (which narrow the read to a range of the table's sort key)."""
        rows = await self.clickhouse.query_rows(
            f"SELECT count() FROM {self.clickhouse.database}.{self.table} FINAL "
            "WHERE tenant = {tenant:String} AND device = {device:String} "
            "AND measured_at = {measured:DateTime64(6, 'UTC')} "
            "AND lower(hex(substring(SHA256(message_key), 1, 16))) = {digest:String}",
            {"tenant": tenant, "device": device, "digest": digest,
             "measured": measured_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")},
        )
        return int(rows[0][0]) if rows else 0


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():  # the waiting batch was cancelled
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
