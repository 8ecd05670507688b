"""The consumer warns when its batches in flight exceed what JetStream lets it hold unacked."""

from __future__ import annotations

from streams.config import ConsumerSettings, Settings
from streams.ingest.consumer import in_flight_warning


def _settings(batch: int, pending: int) -> Settings:
    return Settings(consumer=ConsumerSettings(batch_size=batch, max_ack_pending=pending))


def test_the_defaults_fit() -> None:
    settings = Settings()
    assert in_flight_warning(settings, settings.consumer.concurrency) is None


def test_exactly_full_fits() -> None:
    assert in_flight_warning(_settings(5000, 15_000), 3) is None


def test_more_than_max_ack_pending_is_named_with_the_fix() -> None:
    warning = in_flight_warning(_settings(8000, 20_000), 3)
    assert warning is not None
    assert "24000" in warning and "max_ack_pending (20000)" in warning
    assert "tideway streams init" in warning
