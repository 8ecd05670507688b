"""The error taxonomy of spec 004: every failure is a stable code plus type, source, severity.

``error_sub_type`` in ``job_attempts`` is the stable code (``CHECKSUM_MISMATCH``,
``WORKER_LOST``...); the type is a broad category and the base severity (1 low - 5 very high)
are read from the one table of codes, :mod:`schemas.error_codes`; the source says who
noticed (the stage, the worker, the reaper...) and the severity grows by one when the failure
is final for a critical job, because then the whole run is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from schemas.error_codes import ErrorType, info

__all__ = ["AttemptFailure", "ErrorSource", "ErrorType", "describe", "recorded_severity"]


class ErrorSource(StrEnum):
    """Who noticed the failure (``job_attempts.error_source``)."""

    STAGE = "stage"
    EXECUTOR = "executor"
    STORAGE = "storage"
    DATABASE = "database"
    WORKER = "worker"
    REAPER = "reaper"
    OPERATOR = "operator"


@dataclass(frozen=True, kw_only=True)
class AttemptFailure:
    """How one attempt failed, as recorded in ``job_attempts`` (a record, not an exception)."""

    code: str
    message: str
    retriable: bool
    error_type: ErrorType
    source: ErrorSource
    severity: int


def describe(code: str, message: str, *, retriable: bool, source: ErrorSource) -> AttemptFailure:
    """Place ``code`` in the taxonomy.

    Codes the table gives no type are typed by what raised them: retriable ones are
    transient; a pure stage refusing its input deterministically is a validation error;
    anything else is internal.
    """
    row = info(code)
    if row is not None and row.error_type is not None and row.severity is not None:
        error_type, severity = row.error_type, row.severity
    elif retriable:
        error_type, severity = ErrorType.TRANSIENT, 2
    elif source is ErrorSource.STAGE:
        error_type, severity = ErrorType.VALIDATION, 3
    else:
        error_type, severity = ErrorType.INTERNAL, 3
    return AttemptFailure(
        code=code,
        message=message,
        retriable=retriable,
        error_type=error_type,
        source=source,
        severity=severity,
    )


def recorded_severity(error: AttemptFailure, *, final: bool, critical: bool) -> int:
    """Severity stored for an attempt: one higher when it loses a critical job for good."""
    if final and critical and error.error_type is not ErrorType.CANCELLATION:
        return min(5, error.severity + 1)
    return error.severity
