"""The long-running loops' garbage-collector settings (the consumer's, the worker's) are put back
when the last of them returns."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from streams.collector import tuned_collector


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_the_collector_is_tuned_while_a_consumer_runs_and_put_back_after() -> None:
    gc.set_threshold(700, 10, 10)
    with tuned_collector():
        assert gc.get_threshold() == (50_000, 20, 100)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_overlapping_consumers_put_it_back_only_when_the_last_returns() -> None:
    gc.set_threshold(900, 5, 5)
    first, second = tuned_collector(), tuned_collector()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first to start returns first
    assert gc.get_threshold() == (50_000, 20, 100)
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (900, 5, 5)
    assert gc.get_freeze_count() == 0


def test_it_is_put_back_when_the_consumer_fails() -> None:
    gc.set_threshold(800, 10, 10)
    with pytest.raises(RuntimeError), tuned_collector():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (800, 10, 10)
