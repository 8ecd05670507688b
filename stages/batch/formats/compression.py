"""Gzip handling for session artifacts, in one place.

Artifacts may be uploaded gzip-compressed (magic bytes ``1f 8b``); every reader works on plain
bytes, so callers pass uploads through :func:`unwrap` first. Concatenated gzip members (as
``cat a.gz b.gz`` makes) are supported.

Limits are enforced while streaming, in bounded memory. :func:`inflate` yields the plain
bytes in chunks of at most :data:`CHUNK_BYTES`, feeding the inflater at most
:data:`INPUT_BYTES` of compressed input at a time, and stops with ``TOO_LARGE`` as soon as
the running count passes ``max_bytes`` - a small upload that would inflate past the limit (a
"zip bomb") never has more than one chunk of its output in memory. :func:`inspect`, which the
checks (``artifact_validate``, ``artifact_classify``) use, holds only the head that sniffing
reads plus one chunk: about 1 MiB beyond the stored upload itself, whatever the limit.
Only :func:`unwrap` / :func:`decompress`, for readers that need the whole file, keep the
inflated content - at most ``max_bytes`` of it plus one chunk (see :func:`decompress`).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from schemas import error_codes as codes
from stages.batch.contract import SessionStageError

GZIP_MAGIC: Final = b"\x1f\x8b"
CHUNK_BYTES: Final = 1 << 20  # the most inflated output produced (and held) at once
INPUT_BYTES: Final = 1 << 16  # the most compressed input handed to the inflater at once
# bytes.strip() strips ASCII whitespace: a file of nothing else has no content.
_NON_BLANK: Final = re.compile(rb"[^ \t\n\r\x0b\x0c]")


@dataclass(frozen=True, kw_only=True)
class Inspection:
    """What the checks need of an artifact, found without keeping its inflated content."""

    head: bytes  # the first ``head_bytes`` of the plain content
    size: int  # plain (inflated) size in bytes, at most the limit
    has_content: bool  # anything but ASCII whitespace
    compressed: bool


def is_gzip(data: bytes) -> bool:
    """Whether ``data`` starts with the gzip magic bytes."""
    return data[:2] == GZIP_MAGIC


def _too_large(max_bytes: int) -> SessionStageError:
    return SessionStageError(
        f"decompressed artifact exceeds {max_bytes} bytes", code=codes.TOO_LARGE
    )


def inflate(
    data: bytes, *, max_bytes: int, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """Yield the inflated content of gzip ``data`` (all members) in chunks of ``chunk_bytes``.

    Raises ``SessionStageError`` ``TOO_LARGE`` as soon as the output passes ``max_bytes``
    (before yielding the chunk that passes it) and ``CORRUPT_ARTIFACT`` when the stream is
    damaged or cut off. Holds one output chunk and one input slice at a time.
    """
    view = memoryview(data)
    end = len(view)
    pos = 0
    size = 0
    pending: bytes | memoryview = b""
    try:
        while True:
            # Anything after a member is either another member or trailing zero padding.
            pending = bytes(pending).lstrip(b"\x00")
            while not pending and pos < end:
                pending = bytes(view[pos : pos + INPUT_BYTES]).lstrip(b"\x00")
                pos += INPUT_BYTES
            if not pending:
                return
            inflater = zlib.decompressobj(wbits=31)
            while not inflater.eof:
                if not pending and pos < end:
                    pending = view[pos : pos + INPUT_BYTES]
                    pos += len(pending)
                out = inflater.decompress(pending, chunk_bytes)
                pending = inflater.unconsumed_tail
                if out:
                    size += len(out)
                    if size > max_bytes:
                        raise _too_large(max_bytes)
                    yield out
                elif not inflater.eof and not pending and pos >= end:
                    raise SessionStageError(
                        "gzip stream is truncated", code=codes.CORRUPT_ARTIFACT
                    )
            pending = inflater.unused_data
    except zlib.error as exc:
        raise SessionStageError(
            f"gzip stream is corrupt: {exc}", code=codes.CORRUPT_ARTIFACT
        ) from exc


def inspect(data: bytes, *, max_bytes: int, head_bytes: int) -> Inspection:
    """Size, head and blankness of an artifact that may be gzip, limits enforced while streaming.

    Memory: beyond ``data`` itself, the head (``head_bytes``) and one chunk
    (:data:`CHUNK_BYTES`); the inflated content is never held, so a bomb costs the same as
    a file of exactly the limit.
    """
    if not is_gzip(data):
        if len(data) > max_bytes:
            raise SessionStageError(f"artifact exceeds {max_bytes} bytes", code=codes.TOO_LARGE)
        return Inspection(
            head=data[:head_bytes],
            size=len(data),
            has_content=_NON_BLANK.search(data) is not None,
            compressed=False,
        )
    head = bytearray()
    size = 0
    has_content = False
    for chunk in inflate(data, max_bytes=max_bytes):
        if len(head) < head_bytes:
            head += chunk[: head_bytes - len(head)]
        size += len(chunk)
        has_content = has_content or _NON_BLANK.search(chunk) is not None
    return Inspection(head=bytes(head), size=size, has_content=has_content, compressed=True)


def decompress(data: bytes, *, max_bytes: int) -> bytes:
    """Inflate gzip ``data`` (all members), refusing output larger than ``max_bytes``.

    Raises ``SessionStageError`` ``TOO_LARGE`` past the limit and ``CORRUPT_ARTIFACT`` when
    the stream is damaged or cut off. For readers that need the whole file: memory is the
    inflated content (at most ``max_bytes``) plus one chunk. The chunks go into one growing
    buffer rather than a list joined at the end (which would hold the content twice), and
    ``getvalue()`` hands that buffer over without copying it.
    """
    buffer = io.BytesIO()
    for chunk in inflate(data, max_bytes=max_bytes):
        buffer.write(chunk)
    return buffer.getvalue()


def unwrap(data: bytes, *, max_bytes: int) -> tuple[bytes, bool]:
    """Return ``(plain_bytes, was_compressed)`` for an artifact that may be gzip."""
    if is_gzip(data):
        return decompress(data, max_bytes=max_bytes), True
    if len(data) > max_bytes:
        raise SessionStageError(f"artifact exceeds {max_bytes} bytes", code=codes.TOO_LARGE)
    return data, False


def compress(data: bytes) -> bytes:
    """Gzip ``data`` deterministically (no timestamp in the header), for writers and tests."""
    return gzip.compress(data, compresslevel=6, mtime=0)
