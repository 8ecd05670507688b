"""The archive's pure half: stable keys, Postgres types to Arrow, and the plan's annotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from streams.config import RetentionSettings
from streams.retention.archive import annotate, archive_key, arrow_type
from streams.retention.plan import TIERS, Partition, plan

DAY = timedelta(days=1)
MIDNIGHT = datetime(2030, 3, 10, tzinfo=UTC)


def test_the_key_is_stable_per_table_and_partition_day() -> None:
    assert (
        archive_key("ingestion_messages", "ingestion_messages_p20300310", MIDNIGHT)
        == "archive/ingestion_messages/day=2030-03-10/ingestion_messages_p20300310.parquet"
    )


@pytest.mark.parametrize(
    ("base", "category", "element", "select", "arrow"),
    [
        ("int8", "N", None, '"c"', pa.int64()),
        ("int2", "N", None, '"c"', pa.int16()),
        ("text", "S", None, '"c"', pa.string()),
        ("bytea", "U", None, '"c"', pa.binary()),
        ("timestamptz", "D", None, '"c"', pa.timestamp("us", tz="UTC")),
        ("bool", "B", None, '"c"', pa.bool_()),
        ("uuid", "U", None, '"c"::text', pa.string()),
        ("jsonb", "U", None, '"c"::text', pa.string()),
        ("json", "U", None, '"c"::text', pa.string()),
        ("numeric", "N", None, '"c"::text', pa.string()),  # no precision to give Arrow
        ("some_enum", "E", None, '"c"::text', pa.string()),  # anything unknown: its text
        ("_int4", "A", "int4", '"c"', pa.list_(pa.int32())),
        ("_text", "A", "text", '"c"', pa.list_(pa.string())),
        ("_uuid", "A", "uuid", '"c"::text[]', pa.list_(pa.string())),
    ],
)
def test_postgres_types_map_to_arrow_generically(
    base: str, category: str, element: str | None, select: str, arrow: pa.DataType
) -> None:
    column = arrow_type("c", "the pg type", base, category, element)
    assert (column.select, column.arrow, column.pg_type) == (select, arrow, "the pg type")


def test_the_plan_names_where_an_archived_tiers_partitions_go() -> None:
    parts = [
        Partition(
            parent="ingestion_messages",
            name="ingestion_messages_p20300310",
            lo=MIDNIGHT,
            hi=MIDNIGHT + DAY,
            bytes=1,
        ),
        Partition(
            parent="ingestion_messages",
            name="ingestion_messages_default",
            lo=None,
            hi=None,
            bytes=1,
        ),
        Partition(
            parent="ingestion_stage_passes",
            name="ingestion_stage_passes_p20300310",
            lo=MIDNIGHT,
            hi=MIDNIGHT + DAY,
            bytes=1,
        ),
    ]
    settings = RetentionSettings(archive=("ingestion_records",))
    now = MIDNIGHT + 40 * DAY
    items = annotate(plan(parts, [], settings, now), parts, settings, TIERS)
    to = {i.target: (i.action, i.archive_to) for i in items}
    assert to == {
        "ingestion_messages_p20300310": (
            "drop",
            "archive/ingestion_messages/day=2030-03-10/ingestion_messages_p20300310.parquet",
        ),
        "ingestion_messages_default": ("keep", None),  # DEFAULT is never archived whole
        "ingestion_stage_passes_p20300310": ("drop", None),  # its tier is not archived
    }
    # Off by default: nothing is archived.
    assert all(
        i.archive_to is None
        for i in annotate(
            plan(parts, [], RetentionSettings(), now), parts, RetentionSettings(), TIERS
        )
    )
