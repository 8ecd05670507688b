"""One logging set-up for every command: text for people, JSON lines for machines.

:func:`configure_logging` installs one handler on the root logger whose formatter is structlog's
``ProcessorFormatter``. Both kinds of log call therefore come out the same way:

- ``structlog.stdlib.get_logger(__name__).info("batch done", size=8000)``, and
- plain ``logging.getLogger(__name__).warning(...)`` from Tideway's older modules and from
  third-party libraries (aiohttp, asyncpg, nats…), which pass through the same processors
  (``foreign_pre_chain``) and the same renderer.

Context fields (:data:`CONTEXT_FIELDS`) live in contextvars, bound for a block with
:func:`log_context`; every line logged inside the block, by either kind of logger and from any
task started inside it, carries them. asyncio copies the context into each task, so two batches
or two jobs running concurrently never see each other's fields.

Every rendered line, in either format, goes through :func:`~streams.observability.redact.
redact_rendered` last: no API key, device secret, bearer token, URL or DSN password or nkey
seed reaches the log, whoever formatted it. Tracebacks never show local variables.

A JSON line looks like::

    {"timestamp": "2026-05-01T12:00:00.250Z", "level": "info", "logger": "streams.jobs.worker",
     "message": "job attempt finished", "run_id": "…", "job_id": "…", "attempt": 1}
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import orjson
import structlog
from structlog.typing import Processor

from streams.config import Settings
from streams.observability.redact import redact_rendered

CONTEXT_FIELDS = frozenset({
    "tenant", "device", "message_id", "batch", "run_id", "job_id", "job_type", "attempt",
    "worker_id", "request_id", "trace_id",
})
"""The context fields a log line may carry (see docs/operating.md#logs)."""

_HANDLER_MARK = "_tideway_handler"


def configure_logging(settings: Settings, *, stream: IO[str] | None = None) -> None:
    """Route every log record of this process through one renderer.

    ``settings.log_format`` picks ``text`` (one readable line per event) or ``json`` (one JSON
    object per line); ``settings.log_level`` is the root level. Calling it again replaces the
    handler it installed before (and leaves other handlers, such as pytest's, alone).
    ``stream`` defaults to standard error.
    """
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # A stdlib call's ``extra={...}`` becomes key-value pairs of the line, as structlog's own
    # keyword arguments do (Tideway's modules log through the stdlib, so a library that never
    # configured logging still gets ordinary records).
    foreign: list[Processor] = [*shared, structlog.stdlib.ExtraAdder()]
    final: list[Processor]
    if settings.log_format == "json":
        final = [
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            structlog.processors.JSONRenderer(serializer=_dumps),
            redact_rendered,
        ]
    else:
        # ConsoleRenderer formats exc_info itself (and warns if format_exc_info ran first).
        # A plain traceback, never the rich one with each frame's local variables: those
        # held asyncpg's DSN and password and the API's bearer tokens (issue 26).
        final = [
            structlog.dev.ConsoleRenderer(colors=False,
                                          exception_formatter=structlog.dev.plain_traceback),
            redact_rendered,
        ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=foreign,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Bind context fields for the ``with`` block (``None`` values are left out).

    Only the names in :data:`CONTEXT_FIELDS` are accepted, so the set of fields operators
    search on stays the documented one.
    """
    unknown = fields.keys() - CONTEXT_FIELDS
    if unknown:
        raise ValueError(f"unknown log context field(s): {', '.join(sorted(unknown))}")
    bound = {k: v for k, v in fields.items() if v is not None}
    with structlog.contextvars.bound_contextvars(**bound):
        yield


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger that goes through :func:`configure_logging`'s renderer."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger


def _dumps(event: Any, **_: Any) -> str:
    return orjson.dumps(event, default=str).decode()
