"""Translate what an executor raised into the error taxonomy (``stages.jobs.errors``).

The class decides retriability: a ``StageError`` carries its own flag (pure stages are
deterministic, so normally not retriable); ``TransientError`` and raw I/O errors (``OSError``,
``ConnectionError``, ``TimeoutError``) are retriable; any other ``TidewayError`` is not. An
unexpected exception is a bug: ``INTERNAL_ERROR``, not retried, since the same input would hit
the same bug again.
"""

from __future__ import annotations

from schemas import error_codes as codes
from schemas.errors import unexpected
from stages.errors import StageError
from stages.jobs.errors import AttemptFailure, ErrorSource, describe
from streams.adapters.errors import PgConnectionError, PgIntegrityViolation
from streams.errors import TidewayError, TransientError


def error_from_exception(exc: BaseException) -> AttemptFailure:
    """The :class:`AttemptFailure` to record for ``exc`` raised while executing a job."""
    if isinstance(exc, StageError):
        return describe(exc.code, exc.message, retriable=exc.retriable, source=ErrorSource.STAGE)
    if isinstance(exc, TransientError):
        source = ErrorSource.STORAGE if "STORAGE" in exc.code else ErrorSource.EXECUTOR
        return describe(exc.code, exc.message, retriable=True, source=source)
    if isinstance(exc, TidewayError):
        return describe(exc.code, exc.message, retriable=False, source=ErrorSource.EXECUTOR)
    if isinstance(exc, PgIntegrityViolation):
        return describe("INTEGRITY_ERROR", str(exc), retriable=False, source=ErrorSource.DATABASE)
    if isinstance(exc, (OSError, ConnectionError, TimeoutError, PgConnectionError)):
        return describe(
            codes.TRANSIENT,
            f"{type(exc).__name__}: {exc}",
            retriable=True,
            source=ErrorSource.EXECUTOR,
        )
    # A bug: by class and place, not by its text, which may quote the data it met (a
    # coordinate; spec 000 §15) and is stored with the attempt.
    return describe(
        codes.INTERNAL_ERROR, unexpected(exc), retriable=False, source=ErrorSource.EXECUTOR
    )
