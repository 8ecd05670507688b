"""Which names an uploaded file may have (the notice's rule, shared by the API and the CLI)."""

from __future__ import annotations

import pytest

from streams.errors import UsageError
from streams.sessions.notice import NoticeArtifact, check_file_name, file_name_problem

SHA = "ab" * 32


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "a\\b", "a\x00b", "tab\there", "bell\x07", "del\x7f", "c1\x85",
     "x" * 256, "é" * 128, "bad\udcff"],
)  # fmt: skip
def test_bad_names_are_refused_everywhere(name: str) -> None:
    assert file_name_problem(name) is not None
    with pytest.raises(UsageError):
        check_file_name(name)
    with pytest.raises(ValueError):  # pydantic's ValidationError: intake refuses them too
        NoticeArtifact(name=name, sha256=SHA, size=1)


@pytest.mark.parametrize("name", ["lap.nmea", "x" * 255, "é" * 127, "...", "a..b", "run 1.gpx"])
def test_good_names_pass(name: str) -> None:
    assert file_name_problem(name) is None
    assert NoticeArtifact(name=name, sha256=SHA, size=1).name == name
