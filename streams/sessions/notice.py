"""The notice on ``sessions.<tenant>.<device>`` that says "a whole-session file is ready".

Wire format (JSON, version 1)::

    {"version": 1,
     "artifacts": [{"name": "lap.nmea", "sha256": "<hex>", "size": 1234}],   # in the object store
     "objects": ["2026-03-01T10-00.nmea"],          # or: in the JetStream object-store bucket
     "priority": 0, "config": {...}, "requested_by": "cli", "title": null}

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

import hashlib
import re
import uuid
from collections.abc import Iterable
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "NoticeArtifact",
    "SessionNotice",
    "artifact_id",
    "artifact_set_hash",
    "session_id_for",
]

NAMESPACE = uuid.UUID("6f1d7a52-3c0b-4b6e-9d55-1c7a2e0b9f31")
_SAFE_NAME = re.compile(r"^[^/\\\x00]{1,255}$")


class NoticeArtifact(BaseModel):
    """An artifact already stored at its content address."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_SAFE_NAME.pattern)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class SessionNotice(BaseModel):
    """The body of a session notice (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    artifacts: tuple[NoticeArtifact, ...] = ()
    objects: tuple[str, ...] = ()
    priority: int = Field(0, ge=-1000, le=1000)
    config: dict[str, Any] = Field(default_factory=dict)
    requested_by: str = Field("device", max_length=200)
    title: str | None = Field(None, max_length=500)

    @model_validator(mode="after")
    def _not_empty(self) -> SessionNotice:
        if not self.artifacts and not self.objects:
            raise ValueError("a notice names at least one artifact or bucket object")
        if any(not _SAFE_NAME.match(o) for o in self.objects):
            raise ValueError("bucket object names must not contain '/', '\\\\' or NUL")
        return self

    def encode(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))


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
