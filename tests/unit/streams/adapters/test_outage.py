"""An outage is logged once when it starts and once when it ends, without a traceback."""

from __future__ import annotations

import logging

import pytest

from streams.adapters.outage import Outage, Outages, describe
from streams.errors import TransientError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_warning_when_it_starts_and_one_info_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    outage = Outage("redis", clock=clock)
    outage.recovered()  # up and staying up: nothing to say
    assert caplog.records == []
    for attempt in range(5):
        outage.failed(TransientError(f"Redis unavailable: refused #{attempt}",
                                     code="REDIS_UNAVAILABLE"))
    assert outage.down
    clock.now += 15.04
    outage.recovered()
    outage.recovered()
    assert not outage.down
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "redis unavailable: Redis unavailable: refused #0 (REDIS_UNAVAILABLE)"),
        (logging.INFO, "redis available again after 15.0 s"),
    ]
    assert not any(r.exc_info for r in caplog.records)


def test_a_second_outage_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    outage = Outage("postgres", clock=Clock())
    for _ in range(2):
        outage.failed("connection lost")
        outage.failed("connection lost")
        outage.recovered()
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"] * 2


def test_every_dependency_has_its_own_tracker() -> None:
    outages = Outages()
    names = [outages.postgres, outages.redis, outages.clickhouse, outages.nats]
    assert [o.dependency for o in names] == ["postgres", "redis", "clickhouse", "nats"]
    outages.redis.failed("down")
    assert [o.down for o in names] == [False, True, False, False]
    assert not Outages().redis.down  # one set per process, not one shared by all


def test_reasons_say_what_failed_in_one_line() -> None:
    assert describe(ConnectionRefusedError(111, "Connect call failed")) == (
        "ConnectionRefusedError: [Errno 111] Connect call failed")
    assert describe(TimeoutError()) == "TimeoutError"
    assert describe("connection lost") == "connection lost"
    try:
        raise TransientError("Redis unavailable", code="REDIS_UNAVAILABLE") from OSError("gone")
    except TransientError as exc:
        assert describe(exc) == "OSError: gone (REDIS_UNAVAILABLE)"
