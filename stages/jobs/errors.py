"""The error taxonomy of spec 004: every failure is a stable code plus type, source, severity.

``error_sub_type`` in ``job_attempts`` is the stable code (``CHECKSUM_MISMATCH``,
``WORKER_LOST``...); the type is a broad category looked up from the code, the source says who
noticed (the stage, the worker, the reaper...) and the severity (1 low - 5 very high) grows by
one when the failure is final for a critical job, because then the whole run is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class ErrorType(StrEnum):
    """Broad categories (``job_attempts.error_type``)."""

    VALIDATION = "validation_error"
    TRANSIENT = "transient_error"
    TIMEOUT = "timeout"
    INFRASTRUCTURE = "infrastructure_error"
    CANCELLATION = "cancellation"
    CONFIGURATION = "configuration_error"
    INTERNAL = "internal_error"


class ErrorSource(StrEnum):
    """Who noticed the failure (``job_attempts.error_source``)."""

    STAGE = "stage"
    EXECUTOR = "executor"
    STORAGE = "storage"
    DATABASE = "database"
    WORKER = "worker"
    REAPER = "reaper"
    OPERATOR = "operator"


class Code:
    """Codes the engine itself produces (stages bring their own, e.g. ``UNSUPPORTED_FORMAT``)."""

    SOFT_TIMEOUT: Final = "SOFT_TIMEOUT"
    HARD_TIMEOUT: Final = "HARD_TIMEOUT"
    WORKER_LOST: Final = "WORKER_LOST"
    CANCELLED: Final = "CANCELLED"
    NO_EXECUTOR: Final = "NO_EXECUTOR"
    INTERNAL_ERROR: Final = "INTERNAL_ERROR"
    TRANSIENT: Final = "TRANSIENT"


_T = ErrorType
# code -> (type, base severity). Unknown codes fall back on the retriable flag.
_CODES: Final[Mapping[str, tuple[ErrorType, int]]] = {
    "UNSUPPORTED_FORMAT": (_T.VALIDATION, 3),
    "CORRUPT_ARTIFACT": (_T.VALIDATION, 3),
    "CHECKSUM_MISMATCH": (_T.VALIDATION, 4),
    "INTEGRITY_ERROR": (_T.VALIDATION, 4),
    "SCHEMA_MISMATCH": (_T.VALIDATION, 3),
    "TOO_LARGE": (_T.VALIDATION, 3),
    "EMPTY_ARTIFACT": (_T.VALIDATION, 3),
    "NO_ARTIFACT": (_T.VALIDATION, 4),
    "NO_GNSS_FIX": (_T.VALIDATION, 3),
    "MISSING_INPUT": (_T.INTERNAL, 4),
    "INVALID_CONFIG": (_T.CONFIGURATION, 4),
    Code.NO_EXECUTOR: (_T.CONFIGURATION, 4),
    Code.SOFT_TIMEOUT: (_T.TIMEOUT, 2),
    Code.HARD_TIMEOUT: (_T.TIMEOUT, 3),
    Code.WORKER_LOST: (_T.INFRASTRUCTURE, 2),
    Code.CANCELLED: (_T.CANCELLATION, 1),
    Code.TRANSIENT: (_T.TRANSIENT, 2),
    "PG_UNAVAILABLE": (_T.TRANSIENT, 2),
    "STORAGE_UNAVAILABLE": (_T.TRANSIENT, 2),
    "STORAGE_ERROR": (_T.TRANSIENT, 2),
    Code.INTERNAL_ERROR: (_T.INTERNAL, 4),
}


@dataclass(frozen=True, kw_only=True)
class JobError:
    """One failure of one attempt, as recorded in ``job_attempts``."""

    code: str
    message: str
    retriable: bool
    error_type: ErrorType
    source: ErrorSource
    severity: int


def describe(code: str, message: str, *, retriable: bool, source: ErrorSource) -> JobError:
    """Place ``code`` in the taxonomy.

    Unknown codes are typed by what raised them: retriable ones are transient; a pure stage
    refusing its input deterministically is a validation error; anything else is internal.
    """
    if retriable:
        default = (_T.TRANSIENT, 2)
    elif source is ErrorSource.STAGE:
        default = (_T.VALIDATION, 3)
    else:
        default = (_T.INTERNAL, 3)
    error_type, severity = _CODES.get(code, default)
    return JobError(
        code=code,
        message=message,
        retriable=retriable,
        error_type=error_type,
        source=source,
        severity=severity,
    )


def recorded_severity(error: JobError, *, final: bool, critical: bool) -> int:
    """Severity stored for an attempt: one higher when it loses a critical job for good."""
    if final and critical and error.error_type is not ErrorType.CANCELLATION:
        return min(5, error.severity + 1)
    return error.severity
