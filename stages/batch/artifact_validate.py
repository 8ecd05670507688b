"""Job ``artifact_validate``: is the uploaded file something we may and can process?

Checks, in order, for every artifact of the run: it is not empty; its stored size is within
``config["max_artifact_bytes"]`` (default 256 MiB); its bytes hash to the sha256 recorded at
upload; it inflates (when gzip) to at most ``config["max_decompressed_bytes"]`` (default
1 GiB) of non-blank content; and its *content* sniffs as a format we read. Inflating is
streamed and counted, never kept: checking a gzip bomb holds about 1 MiB beyond the upload
itself, whatever the limit (see :mod:`stages.batch.formats.compression`). The file name is
only compared with the content and reported (``extension_matches``); content decides.

Summary: ``artifacts`` (per artifact: ``name``, ``bytes``, ``sha256``, ``compressed``,
``decompressed_bytes``, ``sniffed_format``, ``extension``, ``extension_matches``),
``artifact_count``, ``bytes_total``. Errors (never retriable): ``NO_ARTIFACT``,
``EMPTY_ARTIFACT``, ``TOO_LARGE``, ``CHECKSUM_MISMATCH``, ``CORRUPT_ARTIFACT``,
``UNSUPPORTED_FORMAT``, ``INVALID_CONFIG``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from schemas import error_codes as codes
from schemas.run_config import RunConfig
from stages.batch.contract import (
    ArtifactBlob,
    SessionStageError,
    StageInput,
    StageOutput,
    run_config,
)
from stages.batch.formats import REGISTRY
from stages.batch.formats.compression import Inspection, inspect, unwrap
from stages.batch.formats.sniff import HEAD_BYTES, sniff

DEFAULT_MAX_ARTIFACT_BYTES: Final = RunConfig().max_artifact_bytes
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = RunConfig().max_decompressed_bytes


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Size limits from the run config."""

    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Limits:
        """The run config's ``max_artifact_bytes`` / ``max_decompressed_bytes``."""
        read = run_config(config)
        return cls(max_artifact_bytes=read.max_artifact_bytes,
                   max_decompressed_bytes=read.max_decompressed_bytes)


def extension(name: str) -> str:
    """The meaningful extension of ``name``, ignoring a trailing ``.gz`` (lower case)."""
    parts = name.lower().rsplit("/", 1)[-1].split(".")
    if len(parts) > 1 and parts[-1] == "gz":
        parts = parts[:-1]
    return parts[-1] if len(parts) > 1 else ""


def _check_stored_size(blob: ArtifactBlob, limits: Limits) -> None:
    if len(blob.data) > limits.max_artifact_bytes:
        raise SessionStageError(
            f"{blob.name}: {len(blob.data)} bytes exceeds {limits.max_artifact_bytes}",
            code=codes.TOO_LARGE,
        )


def plain_bytes(blob: ArtifactBlob, limits: Limits) -> tuple[bytes, bool]:
    """The decompressed content of ``blob`` and whether it was gzip (size limits enforced).

    For readers that need the whole file (``parse_raw``): holds the inflated content, at
    most ``max_decompressed_bytes`` plus one 1 MiB chunk. The checks use :func:`inspect_blob`.
    """
    _check_stored_size(blob, limits)
    return unwrap(blob.data, max_bytes=limits.max_decompressed_bytes)


def inspect_blob(blob: ArtifactBlob, limits: Limits) -> Inspection:
    """Size, sniffing head and blankness of ``blob`` (size limits enforced while inflating).

    Bounded memory whatever the limit: beyond the stored upload (at most
    ``max_artifact_bytes``), the 64 KiB head and one 1 MiB chunk of inflated output - a
    gzip bomb stops with ``TOO_LARGE`` without its content ever being held.
    """
    _check_stored_size(blob, limits)
    return inspect(blob.data, max_bytes=limits.max_decompressed_bytes, head_bytes=HEAD_BYTES)


def validate(blob: ArtifactBlob, limits: Limits) -> dict[str, Any]:
    """Validate one artifact; returns its summary entry or raises ``SessionStageError``."""
    if not blob.data:
        raise SessionStageError(f"{blob.name}: artifact is empty", code=codes.EMPTY_ARTIFACT)
    seen = inspect_blob(blob, limits)
    digest = hashlib.sha256(blob.data).hexdigest()
    if digest != blob.sha256.strip().lower():
        raise SessionStageError(
            f"{blob.name}: sha256 {digest} does not match the recorded {blob.sha256}",
            code=codes.CHECKSUM_MISMATCH,
        )
    if not seen.has_content:
        raise SessionStageError(
            f"{blob.name}: artifact has no content", code=codes.EMPTY_ARTIFACT
        )
    found = sniff(seen.head)
    if found is None:
        raise SessionStageError(
            f"{blob.name}: content is not NMEA, GPX, a known CSV layout or Tideway JSON Lines",
            code=codes.UNSUPPORTED_FORMAT,
        )
    ext = extension(blob.name)
    return {
        "name": blob.name,
        "bytes": len(blob.data),
        "sha256": digest,
        "compressed": seen.compressed,
        "decompressed_bytes": seen.size,
        "sniffed_format": found.format,
        "extension": ext,
        "extension_matches": ext in REGISTRY[found.format].extensions,
    }


def run(inp: StageInput) -> StageOutput:
    """Validate every artifact of the run (see module docstring)."""
    if not inp.artifacts:
        raise SessionStageError("the run has no artifact", code=codes.NO_ARTIFACT)
    limits = Limits.from_config(inp.config)
    entries = [validate(blob, limits) for blob in inp.artifacts]
    return StageOutput(
        summary={
            "artifacts": entries,
            "artifact_count": len(entries),
            "bytes_total": sum(e["bytes"] for e in entries),
        }
    )
