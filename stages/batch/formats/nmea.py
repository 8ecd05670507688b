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
from collections import Counter
from typing import Any, Final

import numpy as np
import pyarrow as pa

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.nmea_writer import write
from stages.batch.formats.parsed import ParsedSession

__all__ = ["read", "write"]

_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()
_DAY_US: Final = 86_400_000_000
_HALF_DAY_US: Final = _DAY_US // 2
_OPEN_EPOCHS: Final = 4
_NO_FIX_MODES: Final = frozenset((b"N", b"S", b"M"))
_RMC_MODE_QUALITY: Final = {b"A": 1, b"D": 2, b"P": 3, b"R": 4, b"F": 5, b"E": 6}
_KMH_PER_KNOT: Final = 1.852
_BANG_SENTENCE: Final = re.compile(rb"![A-Z]{5},")
# GNS mode characters (one per constellation) to the GGA quality they correspond to.
_GNS_MODE_QUALITY: Final = {
    ord("A"): 1, ord("D"): 2, ord("P"): 3, ord("R"): 4, ord("F"): 5, ord("E"): 6
}


class _Epoch:
    """Mutable accumulator for one fix time (internal to the reader)."""

    __slots__ = (
        "alt",
        "course",
        "ctx_date",
        "date",
        "fixq",
        "gll_only",
        "gll_pos",
        "hdop",
        "invalid",
        "lat",
        "lon",
        "mode_q",
        "sats",
        "simulated",
        "speed",
        "tod",
        "valid",
    )

    def __init__(self, tod: int, ctx_date: int | None) -> None:
        self.tod = tod
        self.ctx_date = ctx_date
        self.date: int | None = None
        self.gll_only = True
        self.gll_pos: tuple[float, float] | None = None
        self.valid = False
        self.invalid = False
        self.simulated = False
        self.lat: float | None = None
        self.lon: float | None = None
        self.alt: float | None = None
        self.speed: float | None = None
        self.course: float | None = None
        self.hdop: float | None = None
        self.fixq: int | None = None
        self.mode_q: int | None = None
        self.sats: int | None = None


def _num(b: bytes) -> float | None:
    return float(b) if b else None


def _tod(b: bytes) -> int | None:
    """``hhmmss[.sss]`` to microseconds of the day."""
    if len(b) < 6:
        return None
    sec = int(b[0:2]) * 3600 + int(b[2:4]) * 60
    return sec * 1_000_000 + round(float(b[4:]) * 1_000_000)


def _angle(value: bytes, hemi: bytes, limit: float) -> float | None:
    """``(d)ddmm.mmmm`` + hemisphere to signed degrees (None when empty or out of range)."""
    if not value or not hemi:
        return None
    dot = value.find(b".")
    if dot < 0:
        dot = len(value)
    minutes = float(value[dot - 2 :])
    deg = int(value[: dot - 2] or b"0") + minutes / 60.0
    if minutes >= 60.0 or deg > limit:
        raise ValueError("coordinate out of range")
    return -deg if hemi in (b"S", b"W") else deg


def _date(b: bytes) -> int | None:
    """RMC ``ddmmyy`` to a proleptic ordinal (two-digit years: 80-99 are 19xx)."""
    if len(b) != 6:
        return None
    yy = int(b[4:6])
    return dt.date(yy + (1900 if yy >= 80 else 2000), int(b[2:4]), int(b[0:2])).toordinal()


class _Reader:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.sentences: Counter[str] = Counter()
        self.talkers: Counter[str] = Counter()
        self.epochs: list[_Epoch] = []
        self.open: dict[int, _Epoch] = {}
        self.current: _Epoch | None = None
        self.last_date: int | None = None

    def epoch(self, tod: int) -> _Epoch:
        ep = self.open.get(tod)
        if ep is None:
            ep = _Epoch(tod, self.last_date)
            self.epochs.append(ep)
            self.open[tod] = ep
            if len(self.open) > _OPEN_EPOCHS:
                del self.open[next(iter(self.open))]
        self.current = ep
        return ep

    def position(self, ep: _Epoch, lat: float | None, lon: float | None, ok: bool) -> bool:
        ok = ok and lat is not None and lon is not None
        if ok and ep.lat is None:
            ep.lat, ep.lon = lat, lon
        return ok

    def rmc(self, f: list[bytes]) -> None:
        date = _date(f[9]) if len(f) > 9 else None
        if date is not None:
            self.last_date = date
        tod = _tod(f[1])
        if tod is None or len(f) < 10:
            return
        ep = self.epoch(tod)
        ep.gll_only = False
        if date is not None:
            ep.date = date
        mode = f[12] if len(f) > 12 else b""
        ep.simulated |= mode == b"S"
        ok = f[2] == b"A" and mode not in _NO_FIX_MODES
        ok = self.position(ep, _angle(f[3], f[4], 90.0), _angle(f[5], f[6], 180.0), ok)
        ep.valid |= ok
        ep.invalid |= not ok
        if ok:
            ep.speed = ep.speed if ep.speed is not None else _num(f[7])
            ep.course = ep.course if ep.course is not None else _num(f[8])
            ep.mode_q = _RMC_MODE_QUALITY.get(mode, 1)

    def gga(self, f: list[bytes]) -> None:
        tod = _tod(f[1])
        if tod is None or len(f) < 10:
            return
        ep = self.epoch(tod)
        ep.gll_only = False
        quality = int(f[6]) if f[6] else 0
        ep.simulated |= quality == 8
        ok = 1 <= quality <= 6
        ok = self.position(ep, _angle(f[2], f[3], 90.0), _angle(f[4], f[5], 180.0), ok)
        ep.valid |= ok
        ep.invalid |= not ok
        if ok and ep.fixq is None:
            ep.fixq = quality
            ep.sats = int(f[7]) if f[7] else None
            ep.hdop = _num(f[8])
            ep.alt = _num(f[9]) if len(f) > 10 and f[10] in (b"M", b"") else None

    def gns(self, f: list[bytes]) -> None:
        tod = _tod(f[1])
        if tod is None or len(f) < 10:
            return
        ep = self.epoch(tod)
        ep.gll_only = False
        mode = f[6]
        qualities = [_GNS_MODE_QUALITY[c] for c in mode if c in _GNS_MODE_QUALITY]
        ep.simulated |= bool(mode) and set(mode) == {ord("S")}
        ok = bool(qualities)
        ok = self.position(ep, _angle(f[2], f[3], 90.0), _angle(f[4], f[5], 180.0), ok)
        ep.valid |= ok
        ep.invalid |= not ok
        if ok and ep.fixq is None:
            ep.fixq = max(qualities)
            ep.sats = int(f[7]) if f[7] else None
            ep.hdop = _num(f[8])
            ep.alt = _num(f[9])

    def gll(self, f: list[bytes]) -> None:
        tod = _tod(f[5]) if len(f) > 6 else None
        if tod is None:
            return
        ep = self.epoch(tod)
        mode = f[7] if len(f) > 7 else b""
        ok = f[6] == b"A" and mode not in _NO_FIX_MODES
        lat, lon = _angle(f[1], f[2], 90.0), _angle(f[3], f[4], 180.0)
        if ok and lat is not None and lon is not None and ep.gll_pos is None:
            ep.gll_pos = (lat, lon)

    def vtg(self, f: list[bytes]) -> None:
        ep = self.current
        if ep is None or not ep.valid or len(f) < 8:
            return
        if ep.course is None and f[1]:
            ep.course = float(f[1])
        if ep.speed is None:
            knots = _num(f[5])
            kmh = _num(f[7])
            ep.speed = knots if knots is not None else (kmh / _KMH_PER_KNOT if kmh else kmh)

    def zda(self, f: list[bytes]) -> None:
        if len(f) < 5 or not (f[2] and f[3] and f[4]):
            return
        date = dt.date(int(f[4]), int(f[3]), int(f[2])).toordinal()
        self.last_date = date
        tod = _tod(f[1])
        if tod is not None and tod in self.open:
            self.open[tod].date = date

    def sentence(self, body: bytes) -> None:
        f = body.split(b",")
        tag = f[0]
        if tag[:1] == b"P":
            self.counts["proprietary"] += 1
            return
        kind = tag[2:].decode("ascii", "replace")
        self.sentences[kind] += 1
        self.talkers[tag[:2].decode("ascii", "replace")] += 1
        handler = _HANDLERS.get(kind)
        if handler is None:
            return
        try:
            handler(self, f)
        except (ValueError, IndexError):
            self.counts["bad_fields"] += 1


_HANDLERS: Final = {
    "RMC": _Reader.rmc,
    "GGA": _Reader.gga,
    "GNS": _Reader.gns,
    "GLL": _Reader.gll,
    "VTG": _Reader.vtg,
    "ZDA": _Reader.zda,
}


def _scan(reader: _Reader, data: bytes) -> None:
    """Split lines, verify checksums (vectorised) and feed good sentences to ``reader``."""
    cx = np.bitwise_xor.accumulate(np.frombuffer(data, dtype=np.uint8)).tobytes() if data else b""
    counts = reader.counts
    offset = 0
    for raw in data.split(b"\n"):
        start = offset
        offset += len(raw) + 1
        line = raw.rstrip()
        if not line:
            continue
        if line[:1] == b"#":
            counts["comments"] += 1
            continue
        dollar = line.rfind(b"$")
        bang = line.rfind(b"!")
        if bang > dollar and _BANG_SENTENCE.match(line, bang):
            dollar = bang  # an encapsulated (AIS) sentence; a "!" in a $GPTXT text is not
        star = line.rfind(b"*")
        if dollar < 0 or star < dollar or len(line) - star != 3:
            counts["truncated"] += 1
            continue
        if dollar > 0:
            counts["truncated"] += 1  # a cut-off sentence ran into this one
        want = line[star + 1 :]
        body_xor = cx[start + star - 1] ^ cx[start + dollar]
        try:
            good = int(want, 16) == body_xor
        except ValueError:
            good = False
        if not good:
            counts["bad_checksum"] += 1
            continue
        reader.sentence(line[dollar + 1 : star])


def _resolve_dates(epochs: list[_Epoch], session_date: dt.date | None, *, needed: bool) -> str:
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
    reader = _Reader()
    _scan(reader, data)
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
