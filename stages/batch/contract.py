"""The interface every batch job type under ``stages/batch/`` implements.

Theory of operation
-------------------
A processing run is a DAG of jobs. Each job type is one pure module exposing
``run(inp: StageInput) -> StageOutput`` (``downsample`` exposes ``run_l0``, ``run_l1`` and
``run_l2``). The job engine in ``streams/`` loads everything a job needs *before* calling it
(artifact bytes from the object store, upstream Parquet datasets, upstream summaries, the run
config) and persists what it returns afterwards; the stage itself does no I/O, reads no clock
and no environment, so the same input always gives the same output.

- ``StageInput.artifacts`` - the raw uploaded file(s), bytes exactly as stored (possibly gzip);
  a sequence the engine may load lazily (only the stages that look at an artifact read it).
- ``StageInput.datasets`` - outputs of upstream jobs by dataset name (see
  :mod:`stages.batch.canonical` for the names and schemas of the canonical streams).
- ``StageInput.summaries`` - upstream job summaries by job type (e.g. ``"artifact_classify"``).
- ``StageInput.config`` - the run's config (limits, start/finish line, ...), which a stage
  reads through :func:`run_config` (the one description in :mod:`schemas.run_config`).
- ``StageInput.config`` - the run's config (limits, start/finish line, ...).
- ``StageInput.checkpoint`` - a callback long stages call between steps of their loops; it
  raises :class:`StageStopped` once the job is to stop (cancelled, timed out, its worker
  draining). The stage learns nothing else: no clock, no signal, just the engine's answer.

A stage fails by raising :class:`SessionStageError` with a stable ``code`` from
:mod:`schemas.error_codes`; those are non-retriable because a pure stage given the same input
fails the same way again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from schemas import error_codes as codes
from schemas.run_config import RunConfig, explain, parse_run_config
from stages.errors import StageError

__all__ = [
    "ArtifactBlob",
    "SessionStageError",
    "StageInput",
    "StageOutput",
    "StageStopped",
    "run_config",
]


@dataclass(frozen=True, kw_only=True)
class ArtifactBlob:
    """One uploaded artifact: its name, its bytes as stored, and the sha256 recorded at upload.

    ``sha256`` is the lowercase hex digest of ``data`` as uploaded (i.e. of the compressed bytes
    when the upload is gzip). ``artifact_validate`` verifies it.
    """

    name: str
    data: bytes
    sha256: str


@dataclass(frozen=True, kw_only=True)
class StageInput:
    """Everything a pure session stage may look at."""

    artifacts: Sequence[ArtifactBlob] = ()
    datasets: Mapping[str, pa.Table] = field(default_factory=dict)
    summaries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class StageOutput:
    """What a stage returns: named Arrow tables plus a JSON-able summary.

    Dataset names are stable identifiers (``"gnss"``, ``"imu"``, ``"aux"``, ``"gnss_L1"``, ...);
    the engine stores each as an immutable, content-hashed Parquet file. ``summary`` holds only
    JSON-serialisable values (str, int, float, bool, None, lists and dicts of those).
    """

    datasets: Mapping[str, pa.Table] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)


class SessionStageError(StageError):
    """A session stage could not process its input. Never retriable: the input is the problem.

    ``code`` is a session-stage code of :mod:`schemas.error_codes` (e.g. ``UNSUPPORTED_FORMAT``,
    ``CORRUPT_ARTIFACT``, ``CHECKSUM_MISMATCH``, ``TOO_LARGE``, ``NO_GNSS_FIX``).
    """

    code = "SESSION_STAGE_ERROR"
    retriable = False

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code, retriable=False)


# Keys whose refusal has a code of its own (older than the run-config model, and alerted on).
_KEY_CODES: Mapping[str, str] = {
    "start_finish": codes.INVALID_START_FINISH,
    "session_date": codes.NO_SESSION_DATE,
}


def run_config(config: Mapping[str, Any]) -> RunConfig:
    """``config`` read through :class:`~schemas.run_config.RunConfig`.

    Intake refuses a run whose config is not valid, so this fails only for a run recorded
    before that check: ``SessionStageError`` ``INVALID_CONFIG`` (``INVALID_START_FINISH`` /
    ``NO_SESSION_DATE`` for those keys), naming the key."""
    try:
        return parse_run_config(config)
    except ValidationError as exc:
        first = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        raise SessionStageError(
            explain(exc), code=_KEY_CODES.get(first, codes.INVALID_CONFIG)
        ) from None


class StageStopped(StageError):
    """Raised by ``StageInput.checkpoint`` when the engine wants the stage to stop now."""

    code = "CANCELLED"
    retriable = True
