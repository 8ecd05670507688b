"""The error taxonomy and the translation of executor exceptions."""

from __future__ import annotations

import asyncpg

from stages.batch.contract import SessionStageError
from stages.jobs.errors import ErrorSource, ErrorType, describe, recorded_severity
from streams.errors import PermanentError, TransientError
from streams.jobs.failure import error_from_exception


def test_known_and_unknown_codes() -> None:
    e = describe("CHECKSUM_MISMATCH", "bad", retriable=False, source=ErrorSource.STAGE)
    assert (e.error_type, e.severity, e.source) == (ErrorType.VALIDATION, 4, ErrorSource.STAGE)
    e = describe("SOMETHING_NEW", "x", retriable=True, source=ErrorSource.EXECUTOR)
    assert e.error_type is ErrorType.TRANSIENT
    e = describe("SOMETHING_NEW", "x", retriable=False, source=ErrorSource.EXECUTOR)
    assert e.error_type is ErrorType.INTERNAL
    e = describe("NO_START_LINE", "x", retriable=False, source=ErrorSource.STAGE)
    assert (e.error_type, e.severity) == (ErrorType.VALIDATION, 3)


def test_severity_grows_when_a_critical_job_is_lost() -> None:
    e = describe("WORKER_LOST", "x", retriable=True, source=ErrorSource.REAPER)
    assert recorded_severity(e, final=False, critical=True) == 2
    assert recorded_severity(e, final=True, critical=True) == 3
    assert recorded_severity(e, final=True, critical=False) == 2
    c = describe("CANCELLED", "x", retriable=False, source=ErrorSource.WORKER)
    assert recorded_severity(c, final=True, critical=True) == 1
    top = describe("CHECKSUM_MISMATCH", "x", retriable=False, source=ErrorSource.STAGE)
    assert recorded_severity(top, final=True, critical=True) == 5


def test_exceptions_are_classified_by_class() -> None:
    stage = error_from_exception(SessionStageError("nope", code="UNSUPPORTED_FORMAT"))
    assert (stage.code, stage.retriable, stage.source) == ("UNSUPPORTED_FORMAT", False, "stage")
    storage = error_from_exception(TransientError("s3 down", code="STORAGE_UNAVAILABLE"))
    assert storage.retriable and storage.source is ErrorSource.STORAGE
    assert not error_from_exception(PermanentError("no")).retriable
    io = error_from_exception(ConnectionResetError("reset"))
    assert io.retriable and io.code == "TRANSIENT"
    bug = error_from_exception(KeyError("k"))
    assert bug.code == "INTERNAL_ERROR" and not bug.retriable and "KeyError" in bug.message
    # A bug's text may quote the data it met: the attempt keeps its class and place only.
    try:
        {}["51.123456789"]  # the lookup is what fails
    except KeyError as exc:
        quoted = error_from_exception(exc)
    assert quoted.message.startswith("KeyError at tests.unit.stages.jobs.test_errors:")
    assert "51.123456789" not in quoted.message
    dup = error_from_exception(asyncpg.exceptions.UniqueViolationError("dup"))
    assert dup.code == "INTEGRITY_ERROR" and not dup.retriable
