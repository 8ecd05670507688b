"""The batch half's retention plan (pure): what is kept, what goes, and why."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from streams.config import RetentionSettings
from streams.retention.batch import Inventory, Run, Stored, batch_plan

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = RetentionSettings(superseded_runs_s=7 * 86400, leftovers_s=86400)


def _actions(inv: Inventory) -> dict[str, tuple[str, datetime | None]]:
    return {i.target: (i.action, i.expires_at) for i in batch_plan(inv, SETTINGS, NOW)}


def test_a_superseded_run_goes_after_its_grace_or_at_once_when_its_removal_began() -> None:
    within, past, begun = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    inv = Inventory(
        runs=(
            Run(id=within, superseded_at=NOW - 6 * DAY, removing=False, bytes=10, datasets=2),
            Run(id=past, superseded_at=NOW - 7 * DAY, removing=False, bytes=10, datasets=2),
            Run(id=begun, superseded_at=NOW - DAY, removing=True, bytes=10, datasets=1),
        )
    )
    assert _actions(inv) == {
        f"run {within}": ("keep", NOW + DAY),
        f"run {past}": ("drop", NOW),
        f"run {begun}": ("drop", NOW + 6 * DAY),
    }


def test_a_tmp_leftover_goes_only_when_old_and_older_than_every_running_attempt() -> None:
    claimed = NOW - 3 * DAY
    inv = Inventory(
        tmp=(
            Stored(key="tmp/dead", written_at=claimed - DAY),
            Stored(key="tmp/held", written_at=claimed + DAY),
            Stored(key="tmp/fresh", written_at=NOW - DAY / 2),
        ),
        oldest_running=claimed,
    )
    assert _actions(inv) == {
        "tmp/dead": ("drop", claimed),
        "tmp/held": ("keep", None),
        "tmp/fresh": ("keep", None),  # written since that claim too: it may be the attempt's
    }
    # With no attempt running, age alone decides.
    assert _actions(Inventory(tmp=inv.tmp)) == {
        "tmp/dead": ("drop", claimed),
        "tmp/held": ("drop", claimed + 2 * DAY),
        "tmp/fresh": ("keep", NOW + DAY / 2),
    }


def test_deleted_artifacts_wait_for_the_runs_reading_them_and_orphans_for_their_age() -> None:
    inv = Inventory(
        deleted_artifacts=(
            Stored(key="artifacts/acme/aa/a", written_at=None, bytes=3),
            Stored(key="artifacts/acme/bb/b", written_at=None, bytes=3, in_use=True),
        ),
        orphan_datasets=(
            Stored(key="datasets/old", written_at=NOW - 2 * DAY),
            Stored(key="datasets/new", written_at=NOW - DAY / 2),
        ),
    )
    assert _actions(inv) == {
        "artifacts/acme/aa/a": ("drop", NOW),
        "artifacts/acme/bb/b": ("keep", None),
        "datasets/old": ("drop", NOW - DAY),
        "datasets/new": ("keep", NOW + DAY / 2),
    }


def test_a_run_an_open_retry_may_reuse_is_kept_however_old_unless_its_removal_began() -> None:
    held, begun = uuid.uuid4(), uuid.uuid4()
    inv = Inventory(
        runs=(
            Run(id=held, superseded_at=NOW - 30 * DAY, removing=False, bytes=10, datasets=2,
                held=True),
            Run(id=begun, superseded_at=NOW - 30 * DAY, removing=True, bytes=10, datasets=2,
                held=True),
        )
    )  # fmt: skip
    assert _actions(inv) == {
        f"run {held}": ("keep", None),
        f"run {begun}": ("drop", NOW - 23 * DAY),  # marked: nobody reuses it any more
    }


def test_a_directory_a_kept_run_points_into_is_kept_however_old() -> None:
    inv = Inventory(
        orphan_datasets=(
            Stored(key="datasets/pointed", written_at=NOW - 30 * DAY, in_use=True),
            Stored(key="datasets/free", written_at=NOW - 30 * DAY),
        ),
    )
    assert _actions(inv) == {
        "datasets/pointed": ("keep", None),
        "datasets/free": ("drop", NOW - 29 * DAY),
    }
