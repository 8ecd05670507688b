"""``tideway sessions export``'s options, refused before anything is read (no services)."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from streams.cli import sessions
from streams.cli.main import app
from streams.errors import UsageError


@pytest.mark.parametrize(
    ("fmt", "what", "out", "name"),
    [
        ("csv", None, None, "laps.csv"),
        ("csv", "delta", None, "delta.csv"),
        (None, "sectors", Path("s.CSV"), "sectors.csv"),
        (None, None, Path("race.gpx"), "session.gpx"),
        ("fit", "session", Path("x.bin"), "session.fit"),
    ],
)
def test_the_options_name_one_export_file(
    fmt: str | None, what: str | None, out: Path | None, name: str
) -> None:
    assert sessions._export_name(fmt, what, out) == name


@pytest.mark.parametrize(
    ("fmt", "what", "out", "said"),
    [
        (None, None, None, "--format is required"),
        (None, None, Path("race.txt"), "--format is required"),
        ("xlsx", None, None, "--format must be one of csv, gpx, fit"),
        ("gpx", "laps", None, "--what is for CSV"),
        ("csv", "corners", None, "--what must be one of laps, sectors, delta"),
    ],
)
def test_bad_options_are_refused_in_words(
    fmt: str | None, what: str | None, out: Path | None, said: str
) -> None:
    with pytest.raises(UsageError, match=said):
        sessions._export_name(fmt, what, out)


def test_fit_is_not_written_to_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = SimpleNamespace(stdout=SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(sessions, "sys", terminal)
    result = CliRunner().invoke(app, ["sessions", "export", str(uuid.uuid4()), "--format", "fit"])
    assert result.exit_code == 1
    assert isinstance(result.exception, UsageError)
    assert "give -o FILE" in str(result.exception)
