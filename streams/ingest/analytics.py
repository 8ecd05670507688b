"""ClickHouse analytics: one row per final parameter value of every completed envelope.

The table is a ``ReplacingMergeTree`` whose sorting key ends in the envelope's dedupe key
and the parameter name, so a value published twice — a redelivery after a crash between
publish and the Postgres commit, a replay, a redrive — collapses to one row. Readers that
need exact counts before ClickHouse has merged use ``FINAL`` (``messages show`` does).
Missing values (``None``) make no row. Numbers, integers and booleans (as 0/1) go to
``value``; strings to ``value_text``.

Rows are sent as one Arrow table per batch through ``ClickHouse.insert_arrow``, which runs in
a worker thread and releases the GIL while ClickHouse parses and writes the part.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import pyarrow as pa

from stages.ingest.evaluate import Evaluation, TopicBinding
from streams.clickhouse import ClickHouse, ident

_NUMBER, _BOOLEAN, _TEXT = 0, 1, 2

DDL = """
CREATE TABLE IF NOT EXISTS {database}.{table} (
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
"""

_TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("tenant", pa.string()), ("device", pa.string()), ("topic", pa.string()),
    ("parameter", pa.string()), ("measured_at", _TS), ("value", pa.float64()),
    ("value_text", pa.string()), ("unit", pa.string()), ("message_key", pa.string()),
    ("schema_version_id", pa.string()), ("received_at", _TS),
])


def _layout(binding: TopicBinding) -> tuple[tuple[str, str, int], ...]:
    kinds = {"boolean": _BOOLEAN, "string": _TEXT}
    return tuple(
        (p.name, p.unit or "", kinds.get(p.type.value, _NUMBER)) for p in binding.program.parameters
    )


class AnalyticsRows:
    """Column builder for one batch (see :meth:`Analytics.rows`)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
        self.count = 0

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=SCHEMA)


class Analytics:
    """The analytics sink for one ClickHouse database and table."""

    def __init__(self, clickhouse: ClickHouse, table: str) -> None:
        self.clickhouse = clickhouse
        self.table = ident(table)
        self._layouts: dict[UUID, tuple[tuple[str, str, int], ...]] = {}

    async def ensure(self) -> None:
        """Create the database and table if they do not exist (idempotent)."""
        await self.clickhouse.ensure_database()
        await self.clickhouse.command(
            DDL.format(database=self.clickhouse.database, table=self.table)
        )

    def rows(self, evaluations: Sequence[Evaluation]) -> AnalyticsRows:
        """The rows of every final value of ``evaluations`` (all completed ones)."""
        out = AnalyticsRows()
        c = out.columns
        params, units, values, texts = c["parameter"], c["unit"], c["value"], c["value_text"]
        for ev in evaluations:
            binding, final, env, parts = ev.binding, ev.values, ev.envelope, ev.parts
            assert binding is not None and final is not None and env is not None and parts
            layout = self._layouts.get(binding.schema_topic_id)
            if layout is None:
                layout = self._layouts[binding.schema_topic_id] = _layout(binding)
            n = 0
            for name, unit, kind in layout:
                value = final.get(name)
                if value is None:
                    continue
                params.append(name)
                units.append(unit)
                if kind == _TEXT:
                    values.append(None)
                    texts.append(value)
                else:
                    values.append(float(value) if kind == _NUMBER else (1.0 if value else 0.0))
                    texts.append(None)
                n += 1
            self._repeat(c, n, parts.tenant, parts.device, binding.program.topic, env.ts, ev.key,
                         str(binding.schema_version_id), ev.receipt.received_at)
            out.count += n
        return out

    @staticmethod
    def _repeat(c: dict[str, list[Any]], n: int, tenant: str, device: str, topic: str,
                measured_at: datetime, key: str, version: str, received_at: datetime) -> None:
        c["tenant"] += [tenant] * n
        c["device"] += [device] * n
        c["topic"] += [topic] * n
        c["measured_at"] += [measured_at] * n
        c["message_key"] += [key] * n
        c["schema_version_id"] += [version] * n
        c["received_at"] += [received_at] * n

    async def insert(self, rows: AnalyticsRows) -> None:
        """Insert one batch's rows (``TransientError`` when ClickHouse fails)."""
        if rows.count:
            await self.clickhouse.insert_arrow(self.table, rows.table())

    async def count_for(self, key: str) -> int:
        """How many (deduplicated) rows hold values of the envelope with dedupe key ``key``."""
        rows = await self.clickhouse.query_rows(
            f"SELECT count() FROM {self.clickhouse.database}.{self.table} FINAL "
            "WHERE message_key = {key:String}",
            {"key": key},
        )
        return int(rows[0][0]) if rows else 0
