"""configure_logging: JSON lines with context, readable text, stdlib records in the same format."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator

import orjson
import pytest
import structlog

from streams.config import Settings
from streams.observability.logs import (
    CONTEXT_FIELDS,
    configure_logging,
    get_logger,
    log_context,
)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()


def _configure(fmt: str, level: str = "INFO") -> io.StringIO:
    out = io.StringIO()
    configure_logging(Settings(log_format=fmt, log_level=level), stream=out)  # type: ignore[arg-type]
    return out


def _json_lines(out: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_parse_and_carry_bound_context() -> None:
    out = _configure("json")
    log = get_logger("tideway.test")
    with log_context(run_id="r-1", job_id="j-1", attempt=2, worker_id="w-1"):
        log.info("job attempt started", job_type="parse")
    log.info("outside")

    inside, outside = _json_lines(out)
    assert inside["message"] == "job attempt started"
    assert inside["level"] == "info" and inside["logger"] == "tideway.test"
    assert (inside["run_id"], inside["job_id"], inside["attempt"], inside["worker_id"]) == (
        "r-1", "j-1", 2, "w-1"
    )
    assert inside["job_type"] == "parse"
    assert str(inside["timestamp"]).endswith("Z")
    assert "run_id" not in outside  # the block ended, so did its fields


def test_a_stdlib_logger_comes_out_as_the_same_json() -> None:
    out = _configure("json")
    with log_context(tenant="acme", message_id=42, batch=7):
        logging.getLogger("streams.ingest.consumer").warning("nak %d envelopes", 3)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("aiohttp.server").exception("handler failed")

    warning, error = _json_lines(out)
    assert warning == {
        "message": "nak 3 envelopes", "level": "warning", "logger": "streams.ingest.consumer",
        "tenant": "acme", "message_id": 42, "batch": 7, "timestamp": warning["timestamp"],
    }
    assert error["level"] == "error" and error["tenant"] == "acme"
    assert "RuntimeError: boom" in str(error["exception"])


def test_text_format_is_one_readable_line_per_event() -> None:
    out = _configure("text")
    with log_context(device="ws-001"):
        get_logger("tideway.test").info("batch done", size=8000)
        logging.getLogger("streams.jobs.worker").warning("worker %s stopping", "w-1")

    first, second = out.getvalue().splitlines()
    assert "[info     ] batch done" in first and "size=8000" in first
    assert "device=ws-001" in first and "[tideway.test]" in first
    assert "[warning  ] worker w-1 stopping" in second and "device=ws-001" in second
    assert not first.lstrip().startswith("{")


def test_level_filters_both_kinds_of_logger() -> None:
    out = _configure("json", level="warning")
    get_logger("tideway.test").info("hidden")
    logging.getLogger("streams.x").info("hidden too")
    get_logger("tideway.test").warning("shown")
    assert [line["message"] for line in _json_lines(out)] == ["shown"]


def test_configuring_twice_keeps_one_handler() -> None:
    _configure("json")
    out = _configure("json")
    logging.getLogger("streams.x").warning("once")
    assert len(_json_lines(out)) == 1


async def test_concurrent_tasks_keep_their_own_context() -> None:
    out = _configure("json")
    log = get_logger("tideway.test")

    async def job(job_id: str) -> None:
        with log_context(job_id=job_id):
            await asyncio.sleep(0.01)
            log.info("done")

    await asyncio.gather(job("a"), job("b"))
    assert sorted(str(line["job_id"]) for line in _json_lines(out)) == ["a", "b"]


def test_only_documented_context_fields_are_accepted() -> None:
    assert {"tenant", "run_id", "trace_id", "request_id"} <= CONTEXT_FIELDS
    with pytest.raises(ValueError, match="latitude"), log_context(latitude=1.0):
        pass
