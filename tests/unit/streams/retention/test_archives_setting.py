"""``retention.archives_s`` keeps archives longer than the tiers they come from: a setting
that would remove an archive as soon as it is made is refused with CONFIG_ERROR."""

from __future__ import annotations

import pytest

from streams.config import Settings
from streams.errors import ConfigError
from streams.objects import ObjectStore

DAY = 86400


def test_archives_kept_no_longer_than_an_archived_tier_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"retention\.telemetry_logs_s") as caught:
        Settings(retention={"archive": ["stage_logs", "telemetry_logs"],
                            "archives_s": 90 * DAY})  # telemetry logs are kept 90 days
    assert caught.value.code == "CONFIG_ERROR"


def test_unset_or_longer_than_every_archived_tier_is_accepted() -> None:
    assert Settings().retention.archives_s is None  # kept until removed outside Tideway
    kept = Settings(retention={"archive": ["telemetry_logs"], "archives_s": 365 * DAY})
    assert kept.retention.archives_s == 365 * DAY
    # Only the archived tiers count: stage logs alone, kept 7 days, allow 8.
    Settings(retention={"archive": ["stage_logs"], "archives_s": 8 * DAY})


def test_only_archive_objects_can_be_removed_as_expired(tmp_path: object) -> None:
    store = ObjectStore(str(tmp_path))
    store.put("artifacts/t/x.fit", b"not an archive")
    for key in ("artifacts/t/x.fit", "archive/", "datasets/r/part.parquet"):
        with pytest.raises(ValueError, match="not an archive key"):
            store.remove_expired_archive(key)
    assert store.exists("artifacts/t/x.fit")
    store.put("archive/t/day=2030-01-01/t_p20300101.parquet", b"PAR1")
    store.remove_expired_archive("archive/t/day=2030-01-01/t_p20300101.parquet")
    assert not store.exists("archive/t/day=2030-01-01/t_p20300101.parquet")
    store.remove_expired_archive("archive/t/day=2030-01-01/t_p20300101.parquet")  # no-op
