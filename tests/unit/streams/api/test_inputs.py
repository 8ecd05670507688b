"""The API's text checks: raw query strings and field values (no services)."""

from __future__ import annotations

import pytest

from streams.api.inputs import check_query, check_text
from streams.errors import UsageError


@pytest.mark.parametrize(
    "raw",
    ["device=%00", "device=%FF", "device=%C3", "a%00=1", "t=%E2%82", "x=\udcff"],
)
def test_query_strings_that_are_not_clean_text_are_refused(raw: str) -> None:
    with pytest.raises(UsageError):
        check_query(raw)


@pytest.mark.parametrize("raw", ["", "device=kart-1&limit=5", "title=caf%C3%A9+%F0%9F%8F%81", "a"])
def test_clean_query_strings_pass(raw: str) -> None:
    check_query(raw)


def test_text_refuses_nul_and_lone_surrogates() -> None:
    assert check_text("t", "café") == "café"
    for bad in ("a\x00b", "tw_\udcff"):
        with pytest.raises(UsageError):
            check_text("t", bad)
