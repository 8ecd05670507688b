"""The streaming tables' retention plan and partition arithmetic (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.config import RetentionSettings
from streams.retention.plan import (
    DELETE,
    DROP,
    KEEP,
    Partition,
    bucket_start,
    buckets_ahead,
    generation_due,
    partition_name,
    plan,
)

DAY = timedelta(days=1)
NOW = datetime(2030, 3, 10, 12, 0, tzinfo=UTC)
MIDNIGHT = datetime(2030, 3, 10, tzinfo=UTC)


def test_buckets_are_aligned_and_named_by_their_start() -> None:
    assert bucket_start(NOW, 86400) == MIDNIGHT
    assert bucket_start(NOW + timedelta(seconds=7), 20) == NOW
    assert partition_name("ingestion_messages", MIDNIGHT, 86400) == "ingestion_messages_p20300310"
    assert partition_name("t", NOW, 20) == "t_p20300310_120000"


def test_buckets_ahead_skip_what_an_existing_partition_overlaps() -> None:
    existing = [
        Partition(
            parent="t", name="t_p20300311", lo=MIDNIGHT + DAY, hi=MIDNIGHT + 2 * DAY, bytes=0
        ),
        Partition(parent="t", name="t_default", lo=None, hi=None, bytes=0),
        Partition(
            parent="other",
            name="other_p20300312",
            lo=MIDNIGHT + 2 * DAY,
            hi=MIDNIGHT + 3 * DAY,
            bytes=0,
        ),
    ]
    assert [name for name, _, _ in buckets_ahead("t", existing, NOW, 86400, 2)] == [
        "t_p20300310",
        "t_p20300312",
    ]


def test_a_partition_expires_a_retention_after_its_end_and_only_then_is_dropped() -> None:
    settings = RetentionSettings(ingestion_records_s=3 * 86400)
    parts = [
        Partition(
            parent="ingestion_messages",
            name=f"m{d}",
            lo=MIDNIGHT - d * DAY,
            hi=MIDNIGHT - (d - 1) * DAY,
            bytes=10,
        )
        for d in (2, 3, 4)
    ] + [
        Partition(
            parent="ingestion_messages", name="m_default", lo=None, hi=None, bytes=1, expired_rows=2
        )
    ]
    items = {i.target: i for i in plan(parts, [], settings, NOW)}
    assert items["m4"].expires_at == MIDNIGHT - 3 * DAY + 3 * DAY
    assert (items["m4"].action, items["m3"].action, items["m2"].action) == (DROP, KEEP, KEEP)
    assert items["m3"].expires_at == MIDNIGHT + DAY  # its last row turns 3 days old then
    assert (items["m_default"].action, items["m_default"].rows) == (DELETE, 2)


def test_a_dedupe_generation_expires_after_the_next_one_started_plus_the_horizon() -> None:
    settings = RetentionSettings(dedupe_keys_s=8 * 86400)
    parts = [
        Partition(
            parent="ingest_dedupe_keys", name=f"ingest_dedupe_keys_g{g}", lo=g, hi=g + 1, bytes=0
        )
        for g in (1, 2, 3)
    ]
    started = [(1, NOW - 20 * DAY), (2, NOW - 9 * DAY), (3, NOW - 7 * DAY)]
    items = {i.target: i for i in plan(parts, started, settings, NOW)}
    assert items["ingest_dedupe_keys_g1"].action == DROP  # g2 began 9 days ago
    assert items["ingest_dedupe_keys_g2"].expires_at == NOW + DAY  # g3 began 7 days ago
    assert items["ingest_dedupe_keys_g2"].action == KEEP
    assert items["ingest_dedupe_keys_g3"].expires_at is None  # the current one


def test_a_generation_is_due_when_the_bucket_changed() -> None:
    assert not generation_due(MIDNIGHT + timedelta(minutes=1), NOW, 86400)
    assert generation_due(MIDNIGHT - timedelta(minutes=1), NOW, 86400)


def test_with_the_defaults_a_dedupe_read_probes_three_kept_generations() -> None:
    """Every maintenance round (every 5 minutes) over 30 days of the defaults: a generation
    starts when its 4-day bucket begins, and those past the plan's ``drop`` are gone. The
    generations kept (what a dedupe read probes, besides the next one's empty partition) are
    the current one and the 8 / 4 = 2 before it, and no key is dropped before the horizon.
    With a generation a day (before ``dedupe_generation_s``) it was 9."""
    settings = RetentionSettings()
    assert (settings.dedupe_keys_s, settings.dedupe_generation_s) == (8 * 86400, 4 * 86400)
    now = MIDNIGHT
    started = [(1, now)]
    written_at: dict[int, datetime] = {}  # the last moment each generation took a key
    most = 0
    for _ in range(30 * 24 * 12):
        now += timedelta(minutes=5)
        if generation_due(started[-1][1], now, settings.dedupe_generation_s):
            written_at[started[-1][0]] = now
            started.append((started[-1][0] + 1, now))
        parts = [
            Partition(parent="ingest_dedupe_keys", name=f"g{g}", lo=g, hi=g + 1, bytes=0)
            for g, _ in started
        ]
        for item in plan(parts, started, settings, now):
            if item.action == DROP:
                gen = int(item.target[1:])
                assert now - written_at[gen] >= timedelta(seconds=settings.dedupe_keys_s)
                started = [s for s in started if s[0] != gen]
        most = max(most, len(started))
    assert started[0][0] > 1  # generations were dropped
    assert most == 8 // 4 + 1


def test_a_four_day_generation_is_due_when_its_four_day_bucket_changed() -> None:
    four = 4 * 86400
    begun = bucket_start(NOW, four)
    assert not generation_due(begun + timedelta(minutes=1), begun + 4 * DAY - timedelta(1), four)
    assert generation_due(begun + timedelta(minutes=1), begun + 4 * DAY, four)
