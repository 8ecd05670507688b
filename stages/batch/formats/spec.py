"""One declaration per session format: :class:`FormatSpec`, and what its sniffer sees and says.

Each format's module (``nmea``, ``gpx``, ``csv``, ``jsonl``, ``fit``) ends with its ``SPEC``;
:mod:`stages.batch.formats` lists them once, and everything keyed by format is derived from
that list: the reader and writer dispatch, the sniffing order, the media types, the expected
file extensions, the intake's non-retriable codes and the CLI's ``--format`` choices.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pyarrow as pa

from stages.batch.formats.parsed import ParsedSession

Shape = Literal["xml", "json", "text", "binary"]
"""How a file's head looks before any format is asked (see :func:`.sniff.sniff`)."""


@dataclass(frozen=True, kw_only=True)
class Head:
    """The first bytes of a (decompressed) file, as every sniffer sees them.

    ``raw`` is the head as stored; ``body`` the text a sniffer reads: leading byte-order mark
    and whitespace removed, a UTF-16 XML head re-encoded as UTF-8, NUL bytes dropped from a
    ``binary`` head (NMEA's cut-off lines are NUL-padded).
    """

    raw: bytes
    shape: Shape
    body: bytes


@dataclass(frozen=True, kw_only=True)
class Sniffed:
    """A recognised format: name, variant (layout/version) and hints for later stages."""

    format: str
    variant: str | None = None
    streams: tuple[str, ...] = ()
    imu_frame: str | None = None
    hints: dict[str, Any] = field(default_factory=dict)


class Reader(Protocol):
    """Plain bytes to a parsed session; ``session_date`` (from the upload) dates a log that
    carries no date of its own."""

    def __call__(self, data: bytes, /, *, session_date: dt.date | None) -> ParsedSession: ...


class Writer(Protocol):
    """Canonical streams to plain bytes; ``variant`` picks a layout where a format has several."""

    def __call__(self, streams: Mapping[str, pa.Table], /, *, variant: str | None) -> bytes: ...


@dataclass(frozen=True, kw_only=True)
class FormatSpec:
    """Everything the house knows about one session format.

    ``sniff`` recognises the format from a :class:`Head` (None: not this format); sniffers are
    asked in ascending ``sniff_priority`` and the first answer wins. ``media_type`` is how the
    artifact is stored (``artifacts.content_type``), ``extensions`` the file-name extensions
    expected for it (reported, never decisive), ``bad_input`` the codes its reader raises that
    a retry cannot fix.
    """

    name: str
    media_type: str
    extensions: frozenset[str]
    sniff: Callable[[Head], Sniffed | None]
    sniff_priority: int
    read: Reader
    write: Writer
    bad_input: frozenset[str] = frozenset()


def dateless(read: Callable[[bytes], ParsedSession]) -> Reader:
    """A :class:`Reader` for a format whose files always carry their own dates."""

    def reader(data: bytes, /, *, session_date: dt.date | None) -> ParsedSession:
        return read(data)

    return reader


def one_layout(write: Callable[[Mapping[str, pa.Table]], bytes]) -> Writer:
    """A :class:`Writer` for a format written in a single layout (``variant`` is ignored)."""

    def writer(streams: Mapping[str, pa.Table], /, *, variant: str | None) -> bytes:
        return write(streams)

    return writer
