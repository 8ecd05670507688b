"""``upload_files`` (the CLI path): nothing stays in the store unless intake gets a notice."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.config import Settings
from streams.errors import TransientError, UsageError
from streams.sessions.upload import upload_files


def stored_files(settings: Settings) -> list[str]:
    root = Path(settings.objects())
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_upload_that_cannot_publish_leaves_no_file(
    settings: Settings, tmp_path: Path
) -> None:
    lap = tmp_path / "lap.nmea"
    lap.write_bytes(b"$GPRMC,not really\n")
    # No SESSIONS stream in this test's namespace: the publish finds no stream.
    with pytest.raises(TransientError) as err:
        await upload_files(settings, tenant="acme", device="d1", paths=[lap])
    assert err.value.code == "NATS_PUBLISH"
    assert stored_files(settings) == []


async def test_bad_file_name_or_empty_file_is_refused_before_storing(
    settings: Settings, tmp_path: Path
) -> None:
    good = tmp_path / "good.nmea"
    good.write_bytes(b"data\n")
    bad = tmp_path / "bad\x01name.nmea"
    bad.write_bytes(b"other\n")
    empty = tmp_path / "empty.nmea"
    empty.write_bytes(b"")
    for paths in ([good, bad], [good, empty]):
        with pytest.raises(UsageError):
            await upload_files(settings, tenant="acme", device="d1", paths=paths)
    assert stored_files(settings) == []
