"""Gzip handling for session artifacts, in one place.

Artifacts may be uploaded gzip-compressed (magic bytes ``1f 8b``); every reader works on plain
bytes, so callers pass uploads through :func:`unwrap` first. Decompression is bounded: a
small upload that inflates past ``max_bytes`` (a "zip bomb") stops with ``TOO_LARGE`` instead
of exhausting memory. Concatenated gzip members (as ``cat a.gz b.gz`` makes) are supported.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Final

from schemas import error_codes as codes
from stages.batch.contract import SessionStageError

GZIP_MAGIC: Final = b"\x1f\x8b"
_CHUNK: Final = 1 << 20


def is_gzip(data: bytes) -> bool:
    """Whether ``data`` starts with the gzip magic bytes."""
    return data[:2] == GZIP_MAGIC


def decompress(data: bytes, *, max_bytes: int) -> bytes:
    """Inflate gzip ``data`` (all members), refusing output larger than ``max_bytes``.

    Raises ``SessionStageError`` ``TOO_LARGE`` past the limit and ``CORRUPT_ARTIFACT`` when
    the stream is damaged or cut off.
    """
    out: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(wbits=31)
            chunk = inflater.decompress(rest, _CHUNK)
            while True:
                size += len(chunk)
                if size > max_bytes:
                    raise SessionStageError(
                        f"decompressed artifact exceeds {max_bytes} bytes", code=codes.TOO_LARGE
                    )
                out.append(chunk)
                if inflater.eof or not inflater.unconsumed_tail:
                    break
                chunk = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
            if not inflater.eof:
                raise SessionStageError("gzip stream is truncated", code=codes.CORRUPT_ARTIFACT)
            # Anything after a member is either another member or trailing zero padding.
            rest = inflater.unused_data.lstrip(b"\x00")
    except zlib.error as exc:
        raise SessionStageError(
            f"gzip stream is corrupt: {exc}", code=codes.CORRUPT_ARTIFACT
        ) from exc
    return b"".join(out)


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
