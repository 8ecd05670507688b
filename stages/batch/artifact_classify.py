"""Job ``artifact_classify``: which format, variant and streams each artifact holds.

Content decides (see :mod:`stages.batch.formats.sniff`); gzip is looked through, in bounded
memory (only the sniffed head is kept; limits are enforced while inflating). The
summary describes the first (primary) artifact at the top level and every artifact under
``artifacts``:

``format`` (``nmea`` | ``gpx`` | ``csv`` | ``jsonl`` | ``fit``), ``compressed`` (bool), ``variant``
(NMEA ``0183``; GPX version; CSV layout ``canonical`` | ``racelog``), ``streams_expected``
(which of ``gnss``/``imu``/``aux`` the content announces), ``imu_frame`` (``FLU``/``FRD`` or
None) and ``hints`` (format specific: NMEA talkers and sentence types, GPX TrackPointExtension,
CSV aux columns, JSONL topics). Unrecognised content raises ``UNSUPPORTED_FORMAT``.
"""

from __future__ import annotations

from typing import Any

from schemas import error_codes as codes
from stages.batch.artifact_validate import Limits, inspect_blob
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.batch.formats import REGISTRY
from stages.batch.formats.sniff import sniff


def content_type(fmt: str, *, compressed: bool) -> str:
    """The media type of an artifact of format ``fmt`` as stored (``artifacts.content_type``):
    the format's ``media_type``, gzip when compressed (it wraps any of them)."""
    if compressed:
        return "application/gzip"
    spec = REGISTRY.get(fmt)
    return spec.media_type if spec is not None else "application/octet-stream"


def classify(name: str, plain: bytes, compressed: bool) -> dict[str, Any]:
    """Classify one artifact's decompressed bytes (its head is enough: sniffing reads no more)."""
    found = sniff(plain)
    if found is None:
        raise SessionStageError(
            f"{name}: unsupported or unrecognised content", code=codes.UNSUPPORTED_FORMAT
        )
    return {
        "name": name,
        "format": found.format,
        "compressed": compressed,
        "variant": found.variant,
        "streams_expected": list(found.streams),
        "imu_frame": found.imu_frame,
        "hints": found.hints,
    }


def run(inp: StageInput) -> StageOutput:
    """Classify every artifact of the run."""
    if not inp.artifacts:
        raise SessionStageError("the run has no artifact", code=codes.NO_ARTIFACT)
    limits = Limits.from_config(inp.config)
    entries = []
    for blob in inp.artifacts:
        # Streams the inflation and keeps only the sniffing head: a gzip bomb stops with
        # TOO_LARGE holding about 1 MiB beyond the upload, whatever the limit.
        seen = inspect_blob(blob, limits)
        entries.append(classify(blob.name, seen.head, seen.compressed))
    return StageOutput(summary={**entries[0], "artifacts": entries})
