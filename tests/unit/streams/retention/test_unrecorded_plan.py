"""The unrecorded-outputs tier's plan: dropped once the later of the run's end and the
directory's last write is ``leftovers_s`` old."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.config import RetentionSettings
from streams.retention.unrecorded_outputs import TIER, Unrecorded, unrecorded_plan

T0 = datetime(2030, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def test_the_grace_counts_from_the_later_of_the_runs_end_and_the_last_write() -> None:
    settings = RetentionSettings(leftovers_s=DAY.total_seconds())
    found = [
        Unrecorded(key="datasets/r/a-0", ended_at=T0, written_at=T0 - DAY, bytes=10),
        Unrecorded(key="datasets/r/b-0", ended_at=T0, written_at=T0 + DAY, bytes=20),
        Unrecorded(key="datasets/r/c-0", ended_at=T0, written_at=None),
    ]
    items = unrecorded_plan(found, settings, T0 + DAY + timedelta(seconds=1))
    assert [(i.tier, i.target, i.action, i.bytes) for i in items] == [
        (TIER, "datasets/r/a-0", "drop", 10),
        (TIER, "datasets/r/b-0", "keep", 20),
        (TIER, "datasets/r/c-0", "drop", 0),
    ]
    assert items[1].expires_at == T0 + 2 * DAY
