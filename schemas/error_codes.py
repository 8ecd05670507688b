"""Every stable error code Tideway emits: what it means and whether a retry can help.

This is the one table of codes. Each row is declared once, by :func:`_code`, which records
the row and returns the code string, so the module attribute *is* the code
(``error_codes.UNSUPPORTED_FORMAT == "UNSUPPORTED_FORMAT"``) and stage code raises with it.
A code is stored in ``ingestion_messages.error_code``, stage logs, dead letters,
``job_attempts.error_sub_type`` and API error bodies, and alerted on: never rename one.

``retriable`` says whether the same input may succeed on another attempt (the error's class
decides at run time; the flag here documents what that class says). Codes that the job engine
records also carry their spec-004 ``error_type`` and base ``severity`` (1 low - 5 very high),
read by ``stages.jobs.errors.describe``; a code without them is typed by what raised it.

Not listed: *reason* codes, which explain an outcome rather than an error (a job's skip
reason such as ``NO_IMU_STREAM``, a feature's ``LAP_DETECTION_FAILED``, quality flags such as
``GNSS_GAPS``); they live with the stage or DAG entry that produces them.

``docs/errors.md`` is generated from this table (``python -m schemas.error_codes >
docs/errors.md``); a unit test checks that the page matches and that every code the sources
use is listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class ErrorType(StrEnum):
    """Spec 004's broad categories (``job_attempts.error_type``)."""

    VALIDATION = "validation_error"
    TRANSIENT = "transient_error"
    TIMEOUT = "timeout"
    INFRASTRUCTURE = "infrastructure_error"
    CANCELLATION = "cancellation"
    CONFIGURATION = "configuration_error"
    INTERNAL = "internal_error"


class Area(StrEnum):
    """Where a code comes from (the sections of ``docs/errors.md``)."""

    ENVELOPE = "ingest: envelope"
    VALIDATION = "ingest: validation issues"
    INGEST = "ingest: outcome"
    SCHEMA = "device schemas"
    EXPRESSION = "expressions"
    SESSION = "session stages"
    JOB = "job engine"
    STATE = "state machines"
    RUNTIME = "runtime and services"
    API = "HTTP API"


@dataclass(frozen=True, kw_only=True)
class ErrorCodeInfo:
    """One row of the table."""

    code: str
    area: Area
    meaning: str
    retriable: bool
    error_type: ErrorType | None = None
    severity: int | None = None


_ROWS: dict[str, ErrorCodeInfo] = {}


def _code(
    code: str,
    area: Area,
    meaning: str,
    *,
    retriable: bool = False,
    error_type: ErrorType | None = None,
    severity: int | None = None,
) -> str:
    if code in _ROWS:  # a code has one meaning; a second row would be a second table
        raise ValueError(f"error code {code} is declared twice")
    _ROWS[code] = ErrorCodeInfo(
        code=code,
        area=area,
        meaning=meaning,
        retriable=retriable,
        error_type=error_type,
        severity=severity,
    )
    return code


_A = Area
_T = ErrorType

# -- ingest: the envelope itself -------------------------------------------------------------
ENVELOPE_TOO_LARGE: Final = _code(
    "ENVELOPE_TOO_LARGE", _A.ENVELOPE, "the body is larger than the consumer's `max_payload_bytes`"
)
ENVELOPE_UNPARSEABLE: Final = _code(
    "ENVELOPE_UNPARSEABLE", _A.ENVELOPE, "the body is not a JSON object"
)
ENVELOPE_INVALID: Final = _code(
    "ENVELOPE_INVALID",
    _A.ENVELOPE,
    "a JSON object that breaks the envelope contract (ts, seq, values, ids)",
)
SUBJECT_INVALID: Final = _code(
    "SUBJECT_INVALID", _A.ENVELOPE, "the subject is not `telemetry.<tenant>.<device>.<topic>`"
)

# -- ingest: per-parameter validation issues ------------------------------------------------
MISSING_REQUIRED: Final = _code(
    "MISSING_REQUIRED", _A.VALIDATION, "a required parameter is absent or null"
)
WRONG_TYPE: Final = _code("WRONG_TYPE", _A.VALIDATION, "a value is not the declared type")
TOO_LONG: Final = _code("TOO_LONG", _A.VALIDATION, "a string value is over the length limit")
OUT_OF_RANGE: Final = _code(
    "OUT_OF_RANGE", _A.VALIDATION, "a value is outside the parameter's min/max"
)
NUMBER_TOO_LARGE: Final = _code(
    "NUMBER_TOO_LARGE", _A.VALIDATION, "a number beyond a 64-bit float (`1e309`, 400 digits)"
)
NOT_AN_OBJECT: Final = _code(
    "NOT_AN_OBJECT", _A.VALIDATION, "the envelope's `values` is not a JSON object"
)

# -- ingest: how an envelope ended ----------------------------------------------------------
VALIDATION_FAILED: Final = _code(
    "VALIDATION_FAILED", _A.INGEST, "a required or critical parameter check failed"
)
DEVICE_INACTIVE: Final = _code(
    "DEVICE_INACTIVE", _A.INGEST, "the device is inactive: the envelope is kept for audit only"
)
UNKNOWN_DEVICE: Final = _code(
    "UNKNOWN_DEVICE", _A.INGEST, "the device (or its tenant) is not registered"
)
DEVICE_NO_SCHEMA_VERSION: Final = _code(
    "DEVICE_NO_SCHEMA_VERSION", _A.INGEST, "the device has no schema version assigned"
)
UNKNOWN_TOPIC: Final = _code(
    "UNKNOWN_TOPIC", _A.INGEST, "the topic is not in the device's schema version"
)
PUBLISH_FAILED: Final = _code(
    "PUBLISH_FAILED",
    _A.INGEST,
    "the hot-state/analytics side effects failed for good; the envelope is dead-lettered",
)
PERSIST_REJECTED: Final = _code(
    "PERSIST_REJECTED", _A.INGEST, "Postgres refused this envelope's rows (bad data for a column)"
)
PUBLISH_ERROR: Final = _code(
    "PUBLISH_ERROR", _A.INGEST, "a side-effect write failed with an unexpected error"
)
INTERNAL_ERROR: Final = _code(
    "INTERNAL_ERROR",
    _A.INGEST,
    "a bug: an unexpected exception in a stage, the job engine or the API",
    error_type=_T.INTERNAL,
    severity=4,
)

# -- device schemas -------------------------------------------------------------------------
SCHEMA_FILE_INVALID: Final = _code(
    "SCHEMA_FILE_INVALID", _A.SCHEMA, "the schema file does not describe a valid schema"
)
SCHEMA_FILE_UNREADABLE: Final = _code(
    "SCHEMA_FILE_UNREADABLE", _A.SCHEMA, "the schema file cannot be read (or is not UTF-8)"
)
SCHEMA_FILE_TOO_LARGE: Final = _code(
    "SCHEMA_FILE_TOO_LARGE", _A.SCHEMA, "the schema file is over 1 MiB"
)
SCHEMA_TRIAL_FLAGGED: Final = _code(
    "SCHEMA_TRIAL_FLAGGED", _A.SCHEMA,
    "`schema apply --check-last`: the version would refuse more of the devices' recent "
    "envelopes than `schemas.trial_max_refused_share` allows; nothing was stored",
)
SCHEMA_FILE_YAML: Final = _code(
    "SCHEMA_FILE_YAML",
    _A.SCHEMA,
    "the schema file is not valid YAML (aliases and duplicate keys included)",
)
SCHEMA_RESERVED_NAME: Final = _code(
    "SCHEMA_RESERVED_NAME", _A.SCHEMA, "a parameter takes a reserved name (`value`, a constant)"
)

# -- expressions: rejected when a schema is applied -----------------------------------------
EXPR_ERROR: Final = _code("EXPR_ERROR", _A.EXPRESSION, "an expression error (the family's root)")
EXPR_SYNTAX: Final = _code("EXPR_SYNTAX", _A.EXPRESSION, "not a valid expression")
EXPR_TOO_LONG: Final = _code("EXPR_TOO_LONG", _A.EXPRESSION, "the expression text is too long")
EXPR_TOO_DEEP: Final = _code("EXPR_TOO_DEEP", _A.EXPRESSION, "the expression nests too deeply")
EXPR_TOO_MANY_NODES: Final = _code(
    "EXPR_TOO_MANY_NODES", _A.EXPRESSION, "the expression has too many syntax-tree nodes"
)
EXPR_FORBIDDEN: Final = _code(
    "EXPR_FORBIDDEN", _A.EXPRESSION, "a Python construct outside the language"
)
EXPR_DUNDER: Final = _code("EXPR_DUNDER", _A.EXPRESSION, "a name containing `__`")
EXPR_UNKNOWN_NAME: Final = _code(
    "EXPR_UNKNOWN_NAME", _A.EXPRESSION, "a name that is not a parameter visible here"
)
EXPR_UNKNOWN_FUNCTION: Final = _code(
    "EXPR_UNKNOWN_FUNCTION", _A.EXPRESSION, "a call of something that is not a known function"
)
EXPR_ARITY: Final = _code(
    "EXPR_ARITY", _A.EXPRESSION, "a function called with the wrong number of arguments"
)
EXPR_TYPE: Final = _code("EXPR_TYPE", _A.EXPRESSION, "operand or result types do not fit")
EXPR_LITERAL: Final = _code(
    "EXPR_LITERAL", _A.EXPRESSION, "a literal out of range, not finite or of an unsupported kind"
)
EXPR_CYCLE: Final = _code(
    "EXPR_CYCLE", _A.EXPRESSION, "derived parameters depend on each other in a cycle"
)
EXPR_CONSTANT: Final = _code(
    "EXPR_CONSTANT", _A.EXPRESSION, "a constant part of the expression cannot be computed"
)

# -- expressions: one evaluation on one envelope failed -------------------------------------
EVAL_DIVISION_BY_ZERO: Final = _code(
    "EVAL_DIVISION_BY_ZERO", _A.EXPRESSION, "division or modulo by zero"
)
EVAL_DOMAIN: Final = _code(
    "EVAL_DOMAIN", _A.EXPRESSION, "an argument outside a function's domain (`sqrt(-1)`)"
)
EVAL_OVERFLOW: Final = _code("EVAL_OVERFLOW", _A.EXPRESSION, "a result too large for its type")
EVAL_NOT_FINITE: Final = _code(
    "EVAL_NOT_FINITE", _A.EXPRESSION, "a number result that is infinite or NaN"
)
EVAL_CONVERSION: Final = _code(
    "EVAL_CONVERSION", _A.EXPRESSION, "`number()`/`integer()`/`string()` could not convert"
)
EVAL_STRING_TOO_LONG: Final = _code(
    "EVAL_STRING_TOO_LONG", _A.EXPRESSION, "a string result over the length limit"
)
EVAL_MISSING_INPUT: Final = _code(
    "EVAL_MISSING_INPUT", _A.EXPRESSION, "the values lack a key the expression reads (a bug)"
)
EVAL_FAILED: Final = _code("EVAL_FAILED", _A.EXPRESSION, "any other evaluation failure")

# -- session stages (pure; never retriable) -------------------------------------------------
STAGE_ERROR: Final = _code("STAGE_ERROR", _A.SESSION, "a pure stage refused its input")
SESSION_STAGE_ERROR: Final = _code(
    "SESSION_STAGE_ERROR", _A.SESSION, "a session stage refused its input"
)
UNSUPPORTED_FORMAT: Final = _code(
    "UNSUPPORTED_FORMAT",
    _A.SESSION,
    "content is none of the supported formats (or an unknown unit or IMU frame)",
    error_type=_T.VALIDATION,
    severity=3,
)
CORRUPT_ARTIFACT: Final = _code(
    "CORRUPT_ARTIFACT",
    _A.SESSION,
    "damaged gzip, malformed XML or CSV, a line that is not an envelope",
    error_type=_T.VALIDATION,
    severity=3,
)
FIT_CORRUPT: Final = _code(
    "FIT_CORRUPT",
    _A.SESSION,
    "a FIT file with a broken header, a bad CRC, a field that cannot be decoded, or cut off "
    "before its first record (a file cut off later is read up to the cut, marked truncated)",
    error_type=_T.VALIDATION,
    severity=3,
)
FIT_NOT_ACTIVITY: Final = _code(
    "FIT_NOT_ACTIVITY",
    _A.SESSION,
    "a valid FIT file that is not an activity (settings, workout, course...)",
    error_type=_T.VALIDATION,
    severity=3,
)
NO_SESSION_DATE: Final = _code(
    "NO_SESSION_DATE",
    _A.SESSION,
    "an NMEA log with no date anywhere and none given with the upload: upload it again with "
    "`tideway sessions upload --date YYYY-MM-DD` (API/notice field `date`)",
    error_type=_T.VALIDATION,
    severity=3,
)
CHECKSUM_MISMATCH: Final = _code(
    "CHECKSUM_MISMATCH",
    _A.SESSION,
    "the bytes do not hash to the recorded sha256",
    error_type=_T.VALIDATION,
    severity=4,
)
TOO_LARGE: Final = _code(
    "TOO_LARGE",
    _A.SESSION,
    "a file, object or request body is over its size limit",
    error_type=_T.VALIDATION,
    severity=3,
)
EMPTY_ARTIFACT: Final = _code(
    "EMPTY_ARTIFACT",
    _A.SESSION,
    "the artifact has no content",
    error_type=_T.VALIDATION,
    severity=3,
)
NO_ARTIFACT: Final = _code(
    "NO_ARTIFACT", _A.SESSION, "the run has no artifact", error_type=_T.VALIDATION, severity=4
)
NO_GNSS_FIX: Final = _code(
    "NO_GNSS_FIX",
    _A.SESSION,
    "a stage that needs a GNSS fix found none",
    error_type=_T.VALIDATION,
    severity=3,
)
SCHEMA_MISMATCH: Final = _code(
    "SCHEMA_MISMATCH",
    _A.SESSION,
    "a dataset does not have the schema its reader expects",
    error_type=_T.VALIDATION,
    severity=3,
)
MISSING_INPUT: Final = _code(
    "MISSING_INPUT",
    _A.SESSION,
    "an upstream dataset or summary the stage needs is missing",
    error_type=_T.INTERNAL,
    severity=4,
)
INVALID_CONFIG: Final = _code(
    "INVALID_CONFIG",
    _A.SESSION,
    "the run config has an unknown key or a malformed value (refused at upload and intake; "
    "a stage reading such a value refuses it too)",
    error_type=_T.CONFIGURATION,
    severity=4,
)
INVALID_START_FINISH: Final = _code(
    "INVALID_START_FINISH", _A.SESSION, "the configured start/finish line is malformed"
)
UNKNOWN_TRACK: Final = _code(
    "UNKNOWN_TRACK",
    _A.SESSION,
    "the run config's `track` names neither a saved track of the tenant nor a library track "
    "(`tideway tracks list --library` lists both; `track: none` times no known track)",
    error_type=_T.CONFIGURATION,
    severity=3,
)

# -- job engine -----------------------------------------------------------------------------
SOFT_TIMEOUT: Final = _code(
    "SOFT_TIMEOUT",
    _A.JOB,
    "the job ran past its soft timeout",
    retriable=True,
    error_type=_T.TIMEOUT,
    severity=2,
)
HARD_TIMEOUT: Final = _code(
    "HARD_TIMEOUT",
    _A.JOB,
    "the job ran past its hard timeout and was stopped",
    retriable=True,
    error_type=_T.TIMEOUT,
    severity=3,
)
WORKER_LOST: Final = _code(
    "WORKER_LOST",
    _A.JOB,
    "the worker holding the job stopped heartbeating (the reaper took it back)",
    retriable=True,
    error_type=_T.INFRASTRUCTURE,
    severity=2,
)
WORKER_DRAINED: Final = _code(
    "WORKER_DRAINED",
    _A.JOB,
    "the worker was stopping (SIGTERM) and the job outlasted worker.drain_s: queued again at once",
    retriable=True,
    error_type=_T.INFRASTRUCTURE,
    severity=1,
)
CANCELLED: Final = _code(
    "CANCELLED", _A.JOB, "the job was cancelled", error_type=_T.CANCELLATION, severity=1
)
RUN_CANCELLED: Final = _code("RUN_CANCELLED", _A.JOB, "the run was cancelled by an operator")
NO_EXECUTOR: Final = _code(
    "NO_EXECUTOR",
    _A.JOB,
    "no executor is registered for the job type",
    error_type=_T.CONFIGURATION,
    severity=4,
)
TRANSIENT: Final = _code(
    "TRANSIENT",
    _A.JOB,
    "a dependency failed in a way that may succeed later (network, timeout, restart)",
    retriable=True,
    error_type=_T.TRANSIENT,
    severity=2,
)
INTEGRITY_ERROR: Final = _code(
    "INTEGRITY_ERROR",
    _A.JOB,
    "Postgres refused a row as a constraint violation",
    error_type=_T.VALIDATION,
    severity=4,
)
STAGE_CRASHED: Final = _code(
    "STAGE_CRASHED", _A.JOB, "a session stage raised an unexpected exception (a bug)"
)
WORKER_RESOURCE: Final = _code(
    "WORKER_RESOURCE", _A.JOB, "the worker ran out of memory or hit an OS error", retriable=True
)
INVALID_DAG: Final = _code(
    "INVALID_DAG", _A.JOB, "a DAG definition breaks a structural rule (cycle, unknown dependency)"
)
RUN_NOT_RETRIABLE: Final = _code(
    "RUN_NOT_RETRIABLE", _A.JOB, "only failed, cancelled or partial runs can be retried"
)
RUN_TERMINAL: Final = _code(
    "RUN_TERMINAL",
    _A.JOB,
    "the run has already ended (succeeded, partial, failed or cancelled): there is nothing to "
    "cancel, and nothing is changed (409)",
)
DRIFT_EXCEEDED: Final = _code(
    "DRIFT_EXCEEDED", _A.JOB,
    "a reprocess or backfill ended succeeded, but its key figures moved from the active run's "
    "beyond the `drift.*` limits: it is kept, not made active (`tideway runs promote` makes it "
    "active; the run's `summary.drift` lists each figure)",
)
ROLLBACK_VERIFICATION_FAILED: Final = _code(
    "ROLLBACK_VERIFICATION_FAILED",
    _A.JOB,
    "a dataset of the run a rollback would make active is missing or does not hash to its "
    "recorded sha256: the pointer stays where it is; reprocess the session instead (409)",
)
NO_PREVIOUS_RUN: Final = _code(
    "NO_PREVIOUS_RUN", _A.JOB,
    "the session has no run to act from: none to reprocess, or none active or good before it "
    "to roll back to (409)",
)
EXPORT_UNAVAILABLE: Final = _code(
    "EXPORT_UNAVAILABLE", _A.JOB,
    "the session's active run lacks what the export needs: no finished run yet, or a dataset "
    "the run was processed without (before Tideway made it); reprocess the session (409)",
)
NO_TIMED_LINE: Final = _code(
    "NO_TIMED_LINE", _A.JOB,
    "a track was to be saved from a session whose active run timed no line (no finished lap "
    "detection, or no laps); give the lines with --start-finish instead (409)",
)
RUN_VERIFICATION_FAILED: Final = _code(
    "RUN_VERIFICATION_FAILED",
    _A.JOB,
    "before publishing, a run's dataset did not hash to its recorded sha256 (or is missing) or "
    "its ClickHouse row count differs from the dataset's: the run stays inactive, the session "
    "keeps its active run; `tideway runs retry` resumes it",
    error_type=_T.VALIDATION,
    severity=4,
)
RUN_OUTPUTS_REMOVED: Final = _code(
    "RUN_OUTPUTS_REMOVED",
    _A.JOB,
    "retention removed this superseded run's datasets; it cannot be made active again",
)
BAD_DATASET_NAME: Final = _code(
    "BAD_DATASET_NAME", _A.JOB, "a stage returned a dataset name that is not a safe identifier"
)
MATERIALISE_SCHEMA_CONFLICT: Final = _code(
    "MATERIALISE_SCHEMA_CONFLICT",
    _A.JOB,
    "a ClickHouse column has another type than the dataset's",
)
MATERIALISE_UNSUPPORTED_TYPE: Final = _code(
    "MATERIALISE_UNSUPPORTED_TYPE", _A.JOB, "an Arrow type has no ClickHouse equivalent"
)
ARTIFACT_MISSING: Final = _code(
    "ARTIFACT_MISSING", _A.JOB, "a session notice names an artifact the object store lacks"
)
BAD_NOTICE: Final = _code("BAD_NOTICE", _A.JOB, "a session notice is not valid JSON for its model")
INTAKE_CRASHED: Final = _code(
    "INTAKE_CRASHED",
    _A.JOB,
    "session intake raised an unexpected exception (a bug)",
    retriable=True,
)

# -- state machines -------------------------------------------------------------------------
ILLEGAL_STATUS_TRANSITION: Final = _code(
    "ILLEGAL_STATUS_TRANSITION", _A.STATE, "an ingestion status change the table does not allow"
)
ILLEGAL_PROCESSING_STATE_TRANSITION: Final = _code(
    "ILLEGAL_PROCESSING_STATE_TRANSITION",
    _A.STATE,
    "a telemetry processing-state change the table does not allow",
)
ILLEGAL_JOB_TRANSITION: Final = _code(
    "ILLEGAL_JOB_TRANSITION", _A.STATE, "a job state change the table does not allow"
)
ILLEGAL_RUN_TRANSITION: Final = _code(
    "ILLEGAL_RUN_TRANSITION", _A.STATE, "a run state change the table does not allow"
)
ILLEGAL_TRANSITION: Final = _code(
    "ILLEGAL_TRANSITION", _A.STATE, "Postgres's trigger refused a state change (the same tables)"
)

# -- runtime and services -------------------------------------------------------------------
TIDEWAY_ERROR: Final = _code("TIDEWAY_ERROR", _A.RUNTIME, "a Tideway error (the root's default)")
USAGE_ERROR: Final = _code(
    "USAGE_ERROR", _A.RUNTIME, "the operator asked for something that cannot be done"
)
NOT_FOUND: Final = _code(
    "NOT_FOUND", _A.RUNTIME, "a named thing (device, schema, run, message, route) does not exist"
)
DEVICE_EXISTS: Final = _code("DEVICE_EXISTS", _A.RUNTIME, "the device is already registered")
CONFIG_ERROR: Final = _code(
    "CONFIG_ERROR", _A.RUNTIME, "the settings are invalid or a required service is missing"
)
PERMANENT: Final = _code("PERMANENT", _A.RUNTIME, "this input will never succeed")
WAIT_TIMEOUT: Final = _code(
    "WAIT_TIMEOUT", _A.RUNTIME, "a `--wait` gave up before the run finished", retriable=True
)
PG_UNAVAILABLE: Final = _code(
    "PG_UNAVAILABLE",
    _A.RUNTIME,
    "Postgres cannot be reached or is shutting down",
    retriable=True,
    error_type=_T.TRANSIENT,
    severity=2,
)
PG_TIMEOUT: Final = _code(
    "PG_TIMEOUT",
    _A.RUNTIME,
    "a Postgres statement ran past `postgres_timeouts.command_s` and was cancelled",
    retriable=True,
    error_type=_T.TRANSIENT,
    severity=2,
)
QUOTA_EXCEEDED: Final = _code(
    "QUOTA_EXCEEDED",
    _A.RUNTIME,
    "the upload would pass one of the tenant's daily quotas (artifacts or bytes); "
    "nothing was stored (HTTP 429)",
)
PRIORITY_TOO_HIGH: Final = _code(
    "PRIORITY_TOO_HIGH", _A.RUNTIME, "the requested run priority is above the tenant's maximum"
)
PG_ERROR: Final = _code(
    "PG_ERROR",
    _A.RUNTIME,
    "Postgres could not run the statement now (lock timeout...)",
    retriable=True,
)
PG_CONFLICT: Final = _code(
    "PG_CONFLICT",
    _A.RUNTIME,
    "a transaction kept deadlocking or failing to serialise",
    retriable=True,
)
REDIS_UNAVAILABLE: Final = _code(
    "REDIS_UNAVAILABLE", _A.RUNTIME, "Redis cannot be reached", retriable=True
)
REDIS_ERROR: Final = _code("REDIS_ERROR", _A.RUNTIME, "Redis refused a write")
REDIS_KEY_ERROR: Final = _code(
    "REDIS_KEY_ERROR", _A.RUNTIME, "Redis refused the hot-state write for one key"
)
CLICKHOUSE_UNAVAILABLE: Final = _code(
    "CLICKHOUSE_UNAVAILABLE", _A.RUNTIME, "ClickHouse cannot be reached", retriable=True
)
CLICKHOUSE_ERROR: Final = _code(
    "CLICKHOUSE_ERROR", _A.RUNTIME, "ClickHouse failed a statement", retriable=True
)
CLICKHOUSE_BUSY: Final = _code(
    "CLICKHOUSE_BUSY", _A.RUNTIME, "the embedded ClickHouse is open in another process"
)
NATS_UNAVAILABLE: Final = _code(
    "NATS_UNAVAILABLE", _A.RUNTIME, "NATS cannot be reached", retriable=True
)
NATS_PUBLISH: Final = _code(
    "NATS_PUBLISH", _A.RUNTIME, "a session notice could not be published", retriable=True
)
NATS_PROVISION: Final = _code(
    "NATS_PROVISION",
    _A.RUNTIME,
    "a JetStream stream or consumer could not be set up",
    retriable=True,
)
NATS_OBJECT: Final = _code(
    "NATS_OBJECT",
    _A.RUNTIME,
    "an object could not be read from the session bucket",
    retriable=True,
)
NATS_AUTH_REFUSED: Final = _code(
    "NATS_AUTH_REFUSED", _A.RUNTIME, "the NATS server refused the credentials (nats settings)"
)
NATS_TLS_REFUSED: Final = _code(
    "NATS_TLS_REFUSED", _A.RUNTIME, "the TLS handshake with the NATS server was refused"
)
NATS_AUTH_CONFIG: Final = _code(
    "NATS_AUTH_CONFIG", _A.RUNTIME, "a NATS credentials or nkey seed file cannot be read"
)
NATS_TLS_CONFIG: Final = _code(
    "NATS_TLS_CONFIG", _A.RUNTIME, "the NATS TLS files cannot be loaded or are incomplete"
)
NATS_CONNZ: Final = _code(
    "NATS_CONNZ",
    _A.RUNTIME,
    "nats-server refused the auth service's connection listing (its control user)",
    retriable=True,
)
STORAGE_UNAVAILABLE: Final = _code(
    "STORAGE_UNAVAILABLE",
    _A.RUNTIME,
    "the object store cannot be reached",
    retriable=True,
    error_type=_T.TRANSIENT,
    severity=2,
)
STORAGE_ERROR: Final = _code(
    "STORAGE_ERROR",
    _A.RUNTIME,
    "the object store failed an operation",
    retriable=True,
    error_type=_T.TRANSIENT,
    severity=2,
)
OBJECT_MISSING: Final = _code("OBJECT_MISSING", _A.RUNTIME, "the object store has no such object")
OBJECT_CONFLICT: Final = _code(
    "OBJECT_CONFLICT", _A.RUNTIME, "an immutable object exists with other content"
)
OBJECT_OUTSIDE_ROOT: Final = _code(
    "OBJECT_OUTSIDE_ROOT", _A.RUNTIME, "an object URL points outside the store's root"
)
ARCHIVE_MISMATCH: Final = _code(
    "ARCHIVE_MISMATCH",
    _A.RUNTIME,
    "a partition's Parquet archive does not hold what was exported (rows or bytes differ); "
    "the partition is kept",
)

# -- HTTP API (codes of HTTP-level failures; other API errors carry the codes above) --------
BAD_REQUEST: Final = _code("BAD_REQUEST", _A.API, "the request is malformed")
METHOD_NOT_ALLOWED: Final = _code(
    "METHOD_NOT_ALLOWED", _A.API, "the route does not accept this method"
)
UNAUTHENTICATED: Final = _code(
    "UNAUTHENTICATED", _A.API, "no API key, or an unknown or revoked one (401)"
)
UNSUPPORTED_MEDIA_TYPE: Final = _code(
    "UNSUPPORTED_MEDIA_TYPE", _A.API,
    "a JSON body sent with another `Content-Type` than `application/json`, or none (415)",
)


CODES: Final[Mapping[str, ErrorCodeInfo]] = MappingProxyType(_ROWS)
"""Every code, by code."""


def info(code: str) -> ErrorCodeInfo | None:
    """The table's row for ``code``, or ``None`` for a code it does not list."""
    return CODES.get(code)


def markdown() -> str:
    """``docs/errors.md``: the table as a page, one section per area."""
    lines = [
        "# Error codes",
        "",
        "<!-- Generated from schemas/error_codes.py by"
        " `python -m schemas.error_codes > docs/errors.md`; do not edit by hand. -->",
        "",
        "Every error Tideway reports carries one of these stable codes (in the CLI's message,",
        "API error bodies, `ingestion_messages.error_code`, stage logs, dead letters and",
        "`job_attempts.error_sub_type`). *Retriable* says whether the same input may succeed",
        "on another attempt; job-engine codes also show their spec-004 error type and base",
        "severity (1 low - 5 very high).",
        "",
        "A run's `failure_reason` names the failed job and the *reason* its dependents and",
        "features inherit, `<JOB>_FAILED` (`parse_raw: PARSE_RAW_FAILED`); such reasons are",
        "not error codes and are not listed here. The job's own code (`NO_SESSION_DATE`,",
        "`FIT_CORRUPT`...) is its `last_error_code` (`GET /v1/runs/{id}`, `tideway runs show`),",
        "and `tideway sessions upload --wait` prints it with its meaning.",
    ]
    for area in Area:
        rows = [row for row in CODES.values() if row.area is area]
        lines += ["", f"## {area.value[:1].upper()}{area.value[1:]}", ""]
        lines += ["| code | meaning | retriable | type / severity |", "| --- | --- | --- | --- |"]
        for row in rows:
            typed = f"{row.error_type.value} / {row.severity}" if row.error_type else "–"
            lines.append(
                f"| `{row.code}` | {row.meaning} | {'yes' if row.retriable else 'no'} | {typed} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
