"""ClickHouse analytics retention (chDB): a TTL from the settings on new and existing tables,
applied idempotently, and rows past it gone once ClickHouse merges."""

from __future__ import annotations

from streams.clickhouse import ClickHouse
from streams.ingest.analytics import Analytics
from streams.retention import ttl
from tests.conftest import short_id
from tests.integration.ingest.conftest import Harness

DAY = 86400

# The values table as it was before it had a TTL (an existing deployment's).
_OLD_VALUES = """
CREATE TABLE {db}.{table} (
    tenant LowCardinality(String), device LowCardinality(String), topic LowCardinality(String),
    parameter LowCardinality(String), measured_at DateTime64(6, 'UTC'),
    value Nullable(Float64), value_text Nullable(String), unit LowCardinality(String),
    message_key String, schema_version_id UUID, received_at DateTime64(6, 'UTC'),
    published_at DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = ReplacingMergeTree(published_at)
PARTITION BY toYYYYMM(measured_at)
ORDER BY (tenant, device, topic, parameter, measured_at, message_key)
"""


async def _insert(
    ch: ClickHouse, table: str, key: str, *, measured_days_ago: int, received_days_ago: int
) -> None:
    # One insert per row: one part each, as separate batches make.
    await ch.command(
        f"INSERT INTO {ch.database}.{table} (tenant, device, topic, parameter, measured_at, "
        "value, unit, message_key, schema_version_id, received_at) VALUES ('t', 'd', 'state', "
        f"'temp_c', now64(6) - INTERVAL {measured_days_ago} DAY, 1.5, 'degC', '{key}', "
        f"'00000000-0000-0000-0000-000000000001', now64(6) - INTERVAL {received_days_ago} DAY)"
    )


async def _keys(ch: ClickHouse, table: str) -> list[str]:
    rows = await ch.query_rows(f"SELECT message_key FROM {ch.database}.{table} ORDER BY 1")
    return [r[0] for r in rows]


async def _create(ch: ClickHouse, table: str) -> str:
    rows = await ch.query_rows(f"SHOW CREATE TABLE {ch.database}.{table}")
    return str(rows[0][0])


async def test_provision_gives_the_analytics_table_the_ttl_of_the_settings(
    harness: Harness,
) -> None:
    ch, table = harness.clickhouse, harness.names.analytics_table
    seconds = harness.settings.retention.clickhouse_telemetry_s
    create = await _create(ch, table)
    assert f"TTL toDateTime(received_at) + toIntervalSecond({int(seconds)})" in create
    assert "ttl_only_drop_parts = 1" in create
    assert "materialize_ttl_recalculate_only = 1" in create
    assert "PARTITION BY toYYYYMM(measured_at)" in create
    # Provisioning again (every `tideway up`) changes nothing.
    assert await ttl.ensure_ttl(ch, table, seconds) == []


async def test_an_existing_table_gets_the_ttl_and_expired_rows_go_on_merge(
    harness: Harness,
) -> None:
    ch = ClickHouse(harness.settings.clickhouse(), f"{harness.clickhouse.database}_old")
    await ch.ensure_database()
    table = f"values_{short_id()}"
    await ch.command(_OLD_VALUES.format(db=ch.database, table=table))
    assert " TTL " not in await _create(ch, table)
    # Last season's partition, received then; a backfill of the same months received today;
    # and live rows.
    await _insert(ch, table, "old", measured_days_ago=120, received_days_ago=120)
    await _insert(ch, table, "old2", measured_days_ago=121, received_days_ago=121)
    await _insert(ch, table, "backfill", measured_days_ago=200, received_days_ago=0)
    await _insert(ch, table, "live", measured_days_ago=0, received_days_ago=0)

    applied = await ttl.ensure_ttl(ch, table, 90 * DAY)

    assert len(applied) == 2
    create = await _create(ch, table)
    assert "TTL toDateTime(received_at) + toIntervalSecond(7776000)" in create
    assert "ttl_only_drop_parts = 1" in create
    assert await ttl.ensure_ttl(ch, table, 90 * DAY) == []  # idempotent
    await ch.command(f"OPTIMIZE TABLE {ch.database}.{table} FINAL")
    assert await _keys(ch, table) == ["backfill", "live"]

    # The plan shows what is left, partition by partition, with when ClickHouse drops it.
    items = await ttl.partition_items(ch, table)
    assert len(items) == 2 and {i.rows for i in items} == {1}
    assert all(i.expires_at is not None and i.action == "keep" for i in items)

    # A changed setting changes the TTL.
    assert await ttl.ensure_ttl(ch, table, 30 * DAY) == [
        f"ALTER TABLE {ch.database}.{table} MODIFY TTL "
        "toDateTime(received_at) + toIntervalSecond(2592000)"
    ]


async def test_a_new_table_keeps_its_rows_until_the_ttl(harness: Harness) -> None:
    ch = harness.clickhouse
    table = f"values_{short_id()}"
    await Analytics(ch, table).ensure()
    await ttl.ensure_ttl(ch, table, 90 * DAY)
    await _insert(ch, table, "recent", measured_days_ago=80, received_days_ago=80)
    await _insert(ch, table, "expired", measured_days_ago=95, received_days_ago=95)
    await ch.command(f"OPTIMIZE TABLE {ch.database}.{table} FINAL")
    assert await _keys(ch, table) == ["recent"]
