"""Content sniffing: which session format a (decompressed) file is, from its first bytes.

Only the head of the file is examined (:data:`HEAD_BYTES`), so sniffing costs the same for a
kilobyte and a gigabyte. The file name is never consulted here: an ``.txt`` NMEA log is NMEA
and a ``.csv`` that holds GPX is GPX.

Theory of operation
-------------------
First the head gets a :data:`~.spec.Shape`, whatever format it may be:

- ``xml``: ``<`` first, or an XML head in UTF-16 (a UTF-16 byte-order mark, or ``<`` with a
  NUL beside it), re-encoded as UTF-8 so a UTF-16 GPX is GPX rather than binary (the GPX
  reader's parser decodes the whole file itself);
- ``binary``: NUL bytes in the head (with the NULs dropped from ``body``: a receiver that
  restarts leaves a cut-off NMEA line padded with NULs, and the NMEA reader counts it as
  truncated wherever it falls);
- ``json``: ``{`` first;
- ``text``: anything else.

Then every format's sniffer (``FormatSpec.sniff``) is asked in ascending ``sniff_priority``
and the first that recognises the head wins; each looks only at the shapes it can be: FIT at
any (its header: size byte 12 or 14, ``.FIT`` at bytes 8-11), GPX at ``xml`` (a ``<gpx`` root
element), JSON Lines at ``json``, NMEA at ``text`` and ``binary``, CSV at ``text`` after NMEA.
"""

from __future__ import annotations

from typing import Final

from stages.batch.formats import SNIFFING_ORDER
from stages.batch.formats.spec import Head, Sniffed

HEAD_BYTES: Final = 64 * 1024
_LEADING: Final = b"\xef\xbb\xbf \t\r\n"  # a UTF-8 byte-order mark and whitespace
# How a UTF-16 XML document starts (XML 1.0 appendix F): a byte-order mark, or "<" beside a NUL.
_UTF16_STARTS: Final = (
    (b"\xff\xfe", "utf-16-le", 2),
    (b"\xfe\xff", "utf-16-be", 2),
    (b"<\x00", "utf-16-le", 0),
    (b"\x00<", "utf-16-be", 0),
)


def sniff(plain: bytes) -> Sniffed | None:
    """Recognise ``plain`` (decompressed bytes); None when it is no format we read."""
    head = shape(plain[:HEAD_BYTES])
    for spec in SNIFFING_ORDER:
        found = spec.sniff(head)
        if found is not None:
            return found
    return None


def shape(raw: bytes) -> Head:
    """The :class:`~.spec.Head` of ``raw`` (see the module docstring)."""
    utf16 = _utf16_xml(raw)
    if utf16 is not None:
        return Head(raw=raw, shape="xml", body=utf16)
    if b"\x00" in raw:
        return Head(raw=raw, shape="binary", body=raw.replace(b"\x00", b"").lstrip(_LEADING))
    body = raw.lstrip(_LEADING)
    if body.startswith(b"<"):
        return Head(raw=raw, shape="xml", body=body)
    if body.startswith(b"{"):
        return Head(raw=raw, shape="json", body=body)
    return Head(raw=raw, shape="text", body=body)


def _utf16_xml(head: bytes) -> bytes | None:
    """The head of a UTF-16 XML document re-encoded as UTF-8; None when it is not one."""
    for start, encoding, bom in _UTF16_STARTS:
        if head.startswith(start):
            # errors="ignore": the head may end inside a code unit or a surrogate pair.
            text = head[bom:].decode(encoding, errors="ignore").lstrip(" \t\r\n")
            return text.encode() if text.startswith("<") else None
    return None
