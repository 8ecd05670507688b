"""Capture what every logger writes, as Tideway's JSON lines, for the duration of a block."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from typing import Literal

import structlog

from streams.config import Settings
from streams.observability.logs import configure_logging


@contextlib.contextmanager
def captured_json_logs(level: str = "INFO") -> Iterator[io.StringIO]:
    """``configure_logging`` writing JSON to a buffer; the root logger is put back afterwards."""
    with captured_logs("json", level) as out:
        yield out


@contextlib.contextmanager
def captured_logs(log_format: Literal["text", "json"], level: str = "INFO"
                  ) -> Iterator[io.StringIO]:
    """``configure_logging`` in ``log_format`` writing to a buffer; the root logger is put back
    afterwards."""
    root = logging.getLogger()
    handlers, previous = list(root.handlers), root.level
    out = io.StringIO()
    configure_logging(Settings(log_format=log_format, log_level=level), stream=out)
    try:
        yield out
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(previous)
        structlog.reset_defaults()
