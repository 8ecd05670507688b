"""NMEA 0183 logs: reader (RMC, GGA, GNS, GLL, VTG, ZDA) and writer (RMC + GGA).

Theory of operation
-------------------
A receiver emits, once per *epoch* (fix time), a burst of sentences from one or more talkers
(GP, GN, GL, GA, GB, ...). The reader

1. splits the log into lines; ``#`` lines are comments, blank lines are skipped, a line
   without ``*hh`` or with text before its ``$`` was cut off (``truncated``; a receiver that
   restarts leaves such a line padded with NUL bytes). ``!`` sentences (AIS ``!AIVDM`` /
   ``!AIVDO``) are checksummed like ``$`` ones and counted as other sentences;
2. verifies every checksum at once with a cumulative XOR over the whole buffer (the XOR of a
   sentence body is ``cx[star-1] ^ cx[dollar]``) and skips mismatches (``bad_checksum``);
3. groups RMC/GGA/GNS/GLL by their time field into epochs (the last few epochs stay open, so a
   GLL closing the previous cycle or a GL-talker duplicate still lands in its own epoch; a
   time seen again much later opens a new epoch, which ``time_align`` then removes as a
   duplicate). VTG has no time and joins the epoch of the latest timed sentence;
4. emits one GNSS row per RMC/GGA/GNS epoch with at least one valid fix: RMC status ``A``
   (mode not N/S/M), GGA quality 1-6 (0 no fix, 7 manual, 8 simulator are not fixes) or a GNS
   mode with at least one constellation in A/D/P/R/F/E (GNS, sent by some receivers instead
   of GGA, follows GGA's rules: N no fix, M manual and S simulator are not fixes). GLL only
   fills in, unless the log has no RMC/GGA/GNS at all;
5. dates each epoch from its own RMC/ZDA date, else by carrying the previous epoch's date
   forward (a time of day that falls by more than 12 h is a midnight rollover). A log with no
   date anywhere takes the date given with the upload (``session_date``); without one it is
   refused with ``NO_SESSION_DATE`` - a date is never invented.

Speed is returned in knots (``units`` says so); ``normalise_units`` converts it.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Final

import pyarrow as pa

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.nmea_sentences import BANG_SENTENCE, Epoch, Reader, scan
from stages.batch.formats.nmea_writer import write
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec, Head, Sniffed, one_layout

__all__ = ["SPEC", "read", "sniff", "write"]

_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()
_DAY_US: Final = 86_400_000_000
_HALF_DAY_US: Final = _DAY_US // 2
_SENTENCE: Final = re.compile(rb"\$(?:([A-Z]{2})([A-Z]{3})|P[A-Z0-9]+),")


def _resolve_dates(epochs: list[Epoch], session_date: dt.date | None, *, needed: bool) -> str:
    """Give every epoch a date; return how dates were found (``rmc_zda``, ``upload``, ``none``).

    ``needed``: some epoch is a fix, so a log without a date cannot go on undated.
    """
    first = next((e for e in epochs if e.date is not None or e.ctx_date is not None), None)
    anchor: int | None
    if first is None:
        if not epochs or (not needed and session_date is None):
            return "none"  # no fix to stamp: the log is classified as having no fix
        if session_date is None:
            raise SessionStageError(
                "the NMEA log has no date (no RMC or ZDA date): give the session's date with "
                "`tideway sessions upload --date YYYY-MM-DD` (API and notice field `date`), or "
                "reprocess with run config {\"session_date\": \"YYYY-MM-DD\"}",
                code=codes.NO_SESSION_DATE,
            )
        first = epochs[0]
        anchor = session_date.toordinal()
        date_source = "upload"
    else:
        anchor = first.date if first.date is not None else first.ctx_date
        date_source = "rmc_zda"
    assert anchor is not None
    prev_date, prev_tod = anchor, first.tod
    for e in epochs:
        if e.date is None:
            e.date = prev_date
            if e.tod < prev_tod - _HALF_DAY_US:
                e.date += 1
            elif e.tod > prev_tod + _HALF_DAY_US:
                e.date -= 1
        prev_date, prev_tod = e.date, e.tod
    return date_source


def read(data: bytes, *, session_date: dt.date | None = None) -> ParsedSession:
    """Parse an NMEA 0183 log (plain bytes) into a GNSS stream (speed in knots).

    ``session_date`` (from the upload) dates a log that carries no date of its own; a log
    with RMC/ZDA dates ignores it. Raises ``NO_SESSION_DATE`` when neither has one.
    """
    reader = Reader()
    scan(reader, data)
    epochs = reader.epochs
    if any(not e.gll_only for e in epochs):
        fixes = [e for e in epochs if e.valid and not e.gll_only]
    else:  # a GLL-only log: its epochs are the fixes
        fixes = [e for e in epochs if e.gll_pos is not None]
        for e in fixes:
            e.lat, e.lon = e.gll_pos  # type: ignore[misc]
    date_source = _resolve_dates(epochs, session_date, needed=bool(fixes))
    ts = [(e.date - _EPOCH_ORDINAL) * _DAY_US + e.tod for e in fixes]  # type: ignore[operator]
    table = pa.table(
        {
            "ts": pa.array(ts, canonical.TS_TYPE),
            "lat_deg": pa.array([e.lat for e in fixes], pa.float64()),
            "lon_deg": pa.array([e.lon for e in fixes], pa.float64()),
            "alt_m": pa.array([e.alt for e in fixes], pa.float64()),
            "speed_mps": pa.array([e.speed for e in fixes], pa.float64()),
            "course_deg": pa.array([e.course for e in fixes], pa.float64()),
            "hdop": pa.array([e.hdop for e in fixes], pa.float64()),
            "fix_quality": pa.array(
                [e.fixq if e.fixq is not None else e.mode_q for e in fixes], pa.int8()
            ),
            "sats": pa.array([e.sats for e in fixes], pa.int16()),
        }
    )
    stats: dict[str, Any] = {
        "lines_comment": reader.counts["comments"],
        "bad_checksum": reader.counts["bad_checksum"],
        "truncated": reader.counts["truncated"],
        "bad_fields": reader.counts["bad_fields"],
        "proprietary": reader.counts["proprietary"],
        "sentences": dict(sorted(reader.sentences.items())),
        "talkers": dict(sorted(reader.talkers.items())),
        "epochs": sum(1 for e in epochs if not e.gll_only) or len(epochs),
        "fix_epochs": len(fixes),
        "conflicting_epochs": sum(1 for e in fixes if e.invalid),
        "simulated_epochs": sum(1 for e in epochs if e.simulated),
        "date_source": date_source,
    }
    return ParsedSession(
        streams={canonical.GNSS: canonical.conform(canonical.GNSS, table)},
        units={canonical.GNSS: {"speed_mps": "kn"}},
        stats=stats,
    )


def sniff(head: Head) -> Sniffed | None:
    """A text (or NUL-padded) head is NMEA when at least one line holds a ``$ttsss,`` sentence
    and most non-comment lines hold a ``$`` or ``!`` sentence (AIS ``!AIVDM``/``!AIVDO``)."""
    if head.shape not in ("text", "binary"):
        return None
    talkers: set[str] = set()
    kinds: set[str] = set()
    sentences = other = comments = bang = dollar = 0
    for line in head.body.split(b"\n")[:2000]:
        line = line.strip()
        if not line:
            continue
        if line.startswith(b"#"):
            comments += 1
            continue
        match = _SENTENCE.search(line)
        if match is None:
            if BANG_SENTENCE.search(line):
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


SPEC: Final = FormatSpec(
    name="nmea",
    media_type="text/plain",  # NMEA has no registered type of its own: it is ASCII text
    extensions=frozenset({"nmea", "log", "txt", "nma"}),
    sniff=sniff,
    sniff_priority=40,
    read=read,
    write=one_layout(write),
    bad_input=frozenset({codes.NO_SESSION_DATE}),
)
