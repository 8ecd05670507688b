"""The notice on ``sessions.<tenant>.<device>`` that says "a whole-session file is ready".

Wire format (JSON, version 1)::

    {"version": 1,
     "artifacts": [{"name": "lap.nmea", "sha256": "<hex>", "size": 1234}],   # in the object store
     "objects": ["2026-03-01T10-00.nmea"],          # or: in the JetStream object-store bucket
     "priority": 50, "config": {...}, "requested_by": "cli", "title": null,
     "date": null}                                   # or "YYYY-MM-DD"

``date`` is the day the session was recorded, for files that do not say (an NMEA log without
RMC/ZDA dates); it reaches the parse stage as the run config's ``session_date``
(:meth:`SessionNotice.run_config`). ``config`` is a run config as
:class:`schemas.run_config.RunConfig` describes it: the uploaders check it before they store a
byte (:func:`check_run_config`) and intake again before it records a run, so a notice from a
device with a misspelt key is dead-lettered ``INVALID_CONFIG``, the key named.

``artifacts`` were already stored at their content address under the tenant (the CLI and the
API do that before publishing); ``objects`` name files a device put into the session bucket,
which intake copies into the object store. Tenant and device come from the subject only (NATS
permissions are per subject), never from the body. The artifact identities derived here are
deterministic so an uploader knows the session id before intake has run:

- ``artifact_id = uuid5(NS, "artifact/<tenant>/<sha256>")`` (one row per tenant and content);
- ``artifact_set_hash = sha256`` of the JSON list of ``[artifact_id, sha256]`` pairs sorted by
  sha256 (spec 000 §6.2; sorted so the same files in another order are the same set);
- ``session_id = uuid5(NS, "session/<tenant>/<artifact_set_hash>")``: the same upload twice is
  one session, and (the artifact-set hash being the run's idempotency key) one run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.error_codes import INVALID_CONFIG
from schemas.run_config import explain, parse_run_config
from streams.errors import UsageError
from streams.sessions import priorities

__all__ = [
    "NoticeArtifact",
    "SessionNotice",
    "artifact_id",
    "artifact_set_hash",
    "check_file_name",
    "check_run_config",
    "file_name_problem",
    "run_config_from_json",
    "session_date_from_text",
    "session_id_for",
]

NAMESPACE = uuid.UUID("6f1d7a52-3c0b-4b6e-9d55-1c7a2e0b9f31")
# Control characters (C0, DEL, C1) and path separators: a file name ends up in headers, logs,
# Postgres (which refuses NUL) and maybe a path on some operator's disk.
_UNSAFE_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f/\\]")
_MAX_NAME_BYTES = 255  # what most filesystems allow for one path component


def file_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an uploaded file's name, or ``None`` when it can."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes from an HTTP header
        return "is not valid UTF-8"
    if size == 0:
        return "is empty"
    if size > _MAX_NAME_BYTES:
        return f"is {size} bytes long (at most {_MAX_NAME_BYTES})"
    if name in {".", ".."}:
        return "is a relative path"
    if _UNSAFE_CHAR.search(name):
        return "contains '/', '\\' or a control character"
    return None


def check_file_name(name: str) -> str:
    """``name`` if it is a valid file name (see :func:`file_name_problem`), else UsageError."""
    problem = file_name_problem(name)
    if problem is not None:
        raise UsageError(f"file name {name!r} {problem}")
    return name


def _valid_file_name(name: str) -> str:
    problem = file_name_problem(name)
    if problem is not None:
        raise ValueError(f"file name {problem}")
    return name


FileName = Annotated[str, AfterValidator(_valid_file_name)]


class NoticeArtifact(BaseModel):
    """An artifact already stored at its content address."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: FileName
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class SessionNotice(BaseModel):
    """The body of a session notice (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    artifacts: tuple[NoticeArtifact, ...] = ()
    objects: tuple[FileName, ...] = ()
    priority: int = Field(priorities.DEVICE, ge=-1000, le=1000)
    config: dict[str, Any] = Field(default_factory=dict)
    requested_by: str = Field("device", max_length=200)
    title: str | None = Field(None, max_length=500)
    date: dt.date | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> SessionNotice:
        if not self.artifacts and not self.objects:
            raise ValueError("a notice names at least one artifact or bucket object")
        return self

    def encode(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    def run_config(self) -> dict[str, Any]:
        """The run config: ``config`` plus ``session_date`` when the notice gives a date;
        ``UsageError`` ``INVALID_CONFIG`` when it is not a valid run config."""
        if self.date is None:
            return check_run_config(self.config)
        return check_run_config({**self.config, "session_date": self.date.isoformat()})


def check_run_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` (as given) if it is a valid run config; ``UsageError`` ``INVALID_CONFIG``
    naming the first bad keys (``config.laps.min_lap_sx: unknown key``) if not.

    Every way a run is asked for calls this one check (the CLI, the API's upload and
    reprocess, intake). It also refuses NUL anywhere: the run stores the config as given, and
    ``jsonb`` refuses NUL even where the model lets it through (a key whose value is ``null``
    counts as absent)."""
    if _has_nul(raw):
        raise UsageError("invalid run config: config holds a NUL character", code=INVALID_CONFIG)
    try:
        parse_run_config(raw)
    except ValidationError as exc:
        raise UsageError(f"invalid run config: {explain(exc)}", code=INVALID_CONFIG) from None
    return dict(raw)


def run_config_from_json(text: str, *, name: str = "config") -> dict[str, Any]:
    """The run config a client wrote as JSON text (the upload's ``config`` form field, the
    CLI's ``--config``), checked by :func:`check_run_config`; ``UsageError`` naming ``name``
    when it is not a JSON object."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be a JSON object")
    return check_run_config(value)


def session_date_from_text(raw: str | None, *, name: str = "date") -> dt.date | None:
    """The day a dateless log was recorded, as a client wrote it (``YYYY-MM-DD``: the
    upload's ``date`` field, the CLI's ``--date``); ``None`` when it is not given, and
    ``UsageError`` naming ``name`` when it is not a date."""
    if not raw:
        return None
    try:
        return dt.date.fromisoformat(raw)
    except ValueError as exc:
        raise UsageError(f"{name} must be YYYY-MM-DD") from exc


def _has_nul(value: Any) -> bool:  # JSON may spell NUL "\u0000"
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def artifact_id(tenant: str, sha256: str) -> uuid.UUID:
    """The id of the artifact with content ``sha256`` in ``tenant``."""
    return uuid.uuid5(NAMESPACE, f"artifact/{tenant}/{sha256}")


def artifact_set_hash(tenant: str, sha256s: Iterable[str]) -> str:
    """The hash of a set of artifacts (ids and content hashes, sorted by content hash)."""
    pairs = [[str(artifact_id(tenant, s)), s] for s in sorted(set(sha256s))]
    return hashlib.sha256(orjson.dumps(pairs)).hexdigest()


def session_id_for(tenant: str, set_hash: str) -> uuid.UUID:
    """The session an artifact set belongs to."""
    return uuid.uuid5(NAMESPACE, f"session/{tenant}/{set_hash}")
