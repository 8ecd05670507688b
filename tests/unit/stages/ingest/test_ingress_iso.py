"""``iso_utc`` spells timestamps exactly as ``datetime.isoformat`` does."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from schemas.envelope import EPOCH
from stages.ingest.ingress import iso_utc

# Year 1 to year 9999, in µs from the epoch.
_US = st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999)


@given(_US)
def test_matches_isoformat(us: int) -> None:
    assert iso_utc(us) == (EPOCH + timedelta(microseconds=us)).isoformat()


@given(st.integers(min_value=-62_135_596_800, max_value=253_402_300_799))
def test_whole_seconds_have_no_fraction(second: int) -> None:
    assert iso_utc(second * 1_000_000) == (EPOCH + timedelta(seconds=second)).isoformat()
    assert "." not in iso_utc(second * 1_000_000)
