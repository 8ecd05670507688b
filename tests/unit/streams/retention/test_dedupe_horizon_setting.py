"""The dedupe horizon can be neither shorter than the stream's max_age nor longer than the
rows its keys name: such settings are refused with CONFIG_ERROR."""

from __future__ import annotations

import pytest

from streams.config import Settings
from streams.errors import ConfigError


def test_a_horizon_shorter_than_the_stream_max_age_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"shorter than stream\.max_age_s") as caught:
        Settings(stream={"max_age_s": 10 * 86400}, retention={"dedupe_keys_s": 9 * 86400})
    assert caught.value.code == "CONFIG_ERROR"


def test_a_horizon_longer_than_the_ingestion_records_is_refused() -> None:
    with pytest.raises(ConfigError, match="outlive the row"):
        Settings(retention={"dedupe_keys_s": 40 * 86400, "ingestion_records_s": 30 * 86400})


def test_the_defaults_and_an_equal_horizon_are_accepted() -> None:
    assert Settings().retention.dedupe_keys_s >= Settings().stream.max_age_s
    Settings(stream={"max_age_s": 3600}, retention={"dedupe_keys_s": 3600})


def test_a_key_kept_a_generation_past_the_horizon_must_not_outlive_its_row() -> None:
    """A key is dropped with its generation, up to horizon + generation after it was written:
    that sum, not the horizon alone, must fit in the ingestion records' retention."""
    day = 86400
    with pytest.raises(ConfigError, match="outlive the row") as caught:
        Settings(
            retention={
                "dedupe_keys_s": 28 * day,
                "dedupe_generation_s": 4 * day,
                "ingestion_records_s": 30 * day,
            }
        )
    assert caught.value.code == "CONFIG_ERROR"
    assert "dedupe_generation_s" in str(caught.value)
    Settings(
        retention={
            "dedupe_keys_s": 28 * day,
            "dedupe_generation_s": 2 * day,
            "ingestion_records_s": 30 * day,
        }
    )
