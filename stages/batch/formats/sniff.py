"""Content sniffing: which session format a (decompressed) file is, from its first bytes.

Only the head of the file is examined (:data:`HEAD_BYTES`), so sniffing costs the same for a
kilobyte and a gigabyte. The file name is never consulted here: an ``.txt`` NMEA log is NMEA
and a ``.csv`` that holds GPX is GPX. Rules, in order:

- a FIT header (size byte 12 or 14, ``.FIT`` at bytes 8-11): FIT;
- NUL bytes in the head: binary, unless the head is an NMEA log (a receiver that restarts
  leaves a cut-off line padded with NULs; the reader counts it as truncated wherever it
  falls, so the sniffer must not refuse the log just because it fell in the head);
- ``<`` first: XML, and GPX only when a ``<gpx`` root element is present; an XML head in UTF-16
  (a UTF-16 byte-order mark, or ``<`` with a NUL beside it) is decoded first, so a UTF-16 GPX
  is GPX rather than binary (the GPX reader's parser decodes the whole file itself);
- ``{`` first: JSON Lines when the first complete line is an object with ``ts`` and ``topic``;
- ``$``/``!``/``#`` lines: NMEA when at least one line holds a ``$ttsss,`` sentence and most
  non-comment lines contain a ``$`` or ``!`` sentence (``!AIVDM``/``!AIVDO`` from AIS
  transponders are NMEA too);
- otherwise a CSV whose header matches a known layout (:mod:`.csv_layout`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from stages.batch.formats import fit
from stages.batch.formats.csv_layout import AUX_PREFIX, IMU_COLS, detect_layout, header

HEAD_BYTES: Final = 64 * 1024
_SENTENCE: Final = re.compile(rb"\$(?:([A-Z]{2})([A-Z]{3})|P[A-Z0-9]+),")
_BANG_SENTENCE: Final = re.compile(rb"![A-Z]{5},")
_GPX_VERSION: Final = re.compile(rb"<gpx\b[^>]*\bversion\s*=\s*[\"']([0-9.]+)[\"']")
# How a UTF-16 XML document starts (XML 1.0 appendix F): a byte-order mark, or "<" beside a NUL.
_UTF16_STARTS: Final = (
    (b"\xff\xfe", "utf-16-le", 2),
    (b"\xfe\xff", "utf-16-be", 2),
    (b"<\x00", "utf-16-le", 0),
    (b"\x00<", "utf-16-be", 0),
)


@dataclass(frozen=True, kw_only=True)
class Sniffed:
    """A recognised format: name, variant (layout/version) and hints for later stages."""

    format: str
    variant: str | None = None
    streams: tuple[str, ...] = ()
    imu_frame: str | None = None
    hints: dict[str, Any] = field(default_factory=dict)


def sniff(plain: bytes) -> Sniffed | None:
    """Recognise ``plain`` (decompressed bytes); None when it is no format we read."""
    head = plain[:HEAD_BYTES]
    if fit.is_fit(head):
        return Sniffed(format="fit", variant=f"header{head[0]}", streams=("gnss", "aux"))
    utf16 = _utf16_xml(head)
    if utf16 is not None:
        return _gpx(utf16)
    if b"\x00" in head:
        # Only NUL padding of cut-off NMEA lines is tolerated; any other binary stays refused.
        return _nmea(head.replace(b"\x00", b"").lstrip(b"\xef\xbb\xbf \t\r\n"))
    body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if body.startswith(b"<"):
        return _gpx(body)
    if body.startswith(b"{"):
        return _jsonl(body)
    nmea = _nmea(body)
    if nmea is not None:
        return nmea
    return _csv(body)


def _utf16_xml(head: bytes) -> bytes | None:
    """The head of a UTF-16 XML document re-encoded as UTF-8; None when it is not one."""
    for start, encoding, bom in _UTF16_STARTS:
        if head.startswith(start):
            # errors="ignore": the head may end inside a code unit or a surrogate pair.
            text = head[bom:].decode(encoding, errors="ignore").lstrip(" \t\r\n")
            return text.encode() if text.startswith("<") else None
    return None


def _gpx(body: bytes) -> Sniffed | None:
    if b"<gpx" not in body:
        return None
    version = _GPX_VERSION.search(body)
    tpx = b"TrackPointExtension" in body
    return Sniffed(
        format="gpx",
        variant=version.group(1).decode() if version else None,
        streams=("gnss", "aux") if tpx else ("gnss",),
        hints={"garmin_trackpoint_extension": tpx},
    )


def _jsonl(body: bytes) -> Sniffed | None:
    lines = body.split(b"\n")
    complete = lines[:-1] if len(lines) > 1 else lines
    topics: set[str] = set()
    for line in complete[:200]:
        if not line.strip():
            continue
        try:
            env = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(env, dict) or "ts" not in env or "topic" not in env:
            return None
        topics.add(str(env["topic"]))
    if not topics:
        return None
    streams: tuple[str, ...] = tuple(s for s in ("gnss", "imu") if s in topics)
    if topics - {"gnss", "imu"}:
        streams += ("aux",)
    return Sniffed(format="jsonl", streams=streams, hints={"topics": sorted(topics)})


def _nmea(body: bytes) -> Sniffed | None:
    talkers: set[str] = set()
    kinds: set[str] = set()
    sentences = other = comments = bang = dollar = 0
    for line in body.split(b"\n")[:2000]:
        line = line.strip()
        if not line:
            continue
        if line.startswith(b"#"):
            comments += 1
            continue
        match = _SENTENCE.search(line)
        if match is None:
            if _BANG_SENTENCE.search(line):
                sentences += 1  # AIS and other "!" sentences: NMEA, no fix of their own
                bang += 1
                continue
            other += 1
            continue
        sentences += 1
        dollar += 1
        if match.group(1):
            talkers.add(match.group(1).decode())
            kinds.add(match.group(2).decode())
    if dollar == 0 or other > sentences:
        return None
    return Sniffed(
        format="nmea",
        variant="0183",
        streams=("gnss",),
        hints={
            "talkers": sorted(talkers),
            "sentences": sorted(kinds),
            "comment_lines": comments,
            "bang_sentences": bang,
        },
    )


def _csv(body: bytes) -> Sniffed | None:
    names = header(body)
    layout = detect_layout(names)
    if layout is None:
        return None
    streams: tuple[str, ...] = ()
    gnss_cols = {src for src, (s, _, _) in layout.columns.items() if s == "gnss"}
    if gnss_cols & set(names):
        streams += ("gnss",)
    imu_src = {src for src, (s, _, _) in layout.columns.items() if s == "imu"}
    if imu_src <= set(names) and len(imu_src) == len(IMU_COLS):
        streams += ("imu",)
    aux = [n for n in names if n.startswith(AUX_PREFIX)] + [
        n for n in names if n in layout.columns and layout.columns[n][0] == "aux"
    ]
    if aux:
        streams += ("aux",)
    return Sniffed(
        format="csv",
        variant=layout.name,
        streams=streams,
        imu_frame=layout.imu_frame if "imu" in streams else None,
        hints={"columns": len(names), "aux_columns": aux},
    )
