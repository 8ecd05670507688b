"""What lands in ClickHouse: one row per final value, with its unit, and the sink's upgrade
from the earlier input shape."""

from __future__ import annotations

from streams.clickhouse import ClickHouse
from streams.ingest.analytics import SCHEMA, Analytics
from tests.integration.ingest.conftest import Harness, good_values

# The input table and view as they were before units travelled as two arrays.
_OLD_INPUT = """
CREATE TABLE {db}.{table}_in (
    tenant String, device String, topic String, measured_at DateTime64(6, 'UTC'),
    message_key String, schema_version_id UUID, received_at DateTime64(6, 'UTC'),
    values_json String, units_json String
) ENGINE = Null
"""
_OLD_VIEW = """
CREATE MATERIALIZED VIEW {db}.{table}_explode TO {db}.{table} AS
SELECT tenant, device, topic, kv.1 AS parameter, measured_at,
       toFloat64OrNull(kv.2) AS value, CAST(NULL, 'Nullable(String)') AS value_text,
       JSONExtractString(units_json, kv.1) AS unit,
       message_key, schema_version_id, received_at
FROM {db}.{table}_in
ARRAY JOIN JSONExtractKeysAndValuesRaw(values_json) AS kv
"""


async def _rows(h: Harness, topic: str) -> list[tuple[object, ...]]:
    return await h.clickhouse.query_rows(
        f"SELECT parameter, unit, value, value_text "
        f"FROM {h.clickhouse.database}.{h.names.analytics_table} FINAL "
        "WHERE topic = {t:String} ORDER BY parameter", {"t": topic},
    )


async def test_each_final_value_lands_with_its_own_topics_unit(fleet: Harness) -> None:
    # Two topics of one schema in one batch: each row must take the unit of its own topic.
    await fleet.publish("d1", {"ts": 1_000, "values": good_values(temp=25.0)})
    await fleet.publish("d2", {"ts": 2_000, "values": {"lat": 52.5, "lon": -1.25}}, topic="gps")
    stats = await fleet.consume(2)
    assert sum(s.size for s in stats) == 2
    assert await _rows(fleet, "state") == [
        ("battery_v", "V", 3.7, None),
        ("door_open", "", 0.0, None),
        ("firmware", "", None, "1.0"),
        ("heat_index", "degF", 77.0, None),
        ("humidity", "%", 40.0, None),
        ("pressure_hpa", "hPa", 1013.25, None),
        ("temp_c", "degC", 25.0, None),
        ("temp_f", "degF", 77.0, None),
        ("wind_dir", "deg", 270.0, None),
        ("wind_ms", "m/s", 3.2, None),
    ]
    assert await _rows(fleet, "gps") == [("lat", "", 52.5, None), ("lon", "", -1.25, None)]


async def test_an_input_table_of_the_earlier_shape_is_replaced_and_rows_kept(
    harness: Harness,
) -> None:
    ch = ClickHouse(harness.settings.clickhouse(), f"{harness.clickhouse.database}_old")
    table = "values_old"
    analytics = Analytics(ch, table)
    await analytics.ensure()  # the values table (kept) ...
    db = ch.database
    await ch.command(f"DROP VIEW {db}.{table}_explode")  # ... under the old input and view
    await ch.command(f"DROP TABLE {db}.{table}_in")
    await ch.command(_OLD_INPUT.format(db=db, table=table))
    await ch.command(_OLD_VIEW.format(db=db, table=table))
    await ch.command(
        f"INSERT INTO {db}.{table}_in VALUES ('t', 'd', 'state', '2026-01-01 00:00:00', 'k1', "
        "'00000000-0000-0000-0000-000000000001', '2026-01-01 00:00:00', '{\"a\": 1.5}', "
        "'{\"a\": \"V\"}')"
    )
    assert await analytics._input_is_outdated()

    await analytics.ensure()

    assert not await analytics._input_is_outdated()
    columns = await ch.query_rows(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = {t:String} "
        "ORDER BY position", {"db": db, "t": f"{table}_in"},
    )
    assert [c[0] for c in columns] == SCHEMA.names
    view = await ch.query_rows(
        "SELECT create_table_query FROM system.tables "
        "WHERE database = {db:String} AND name = {t:String}", {"db": db, "t": f"{table}_explode"},
    )
    assert "unit_values" in view[0][0] and "units_json" not in view[0][0]
    kept = await ch.query_rows(f"SELECT parameter, unit, value FROM {db}.{table}")
    assert kept == [("a", "V", 1.5)]  # the values table was not touched
    await analytics.ensure()  # idempotent once upgraded
    assert not await analytics._input_is_outdated()
