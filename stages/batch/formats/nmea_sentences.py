"""NMEA 0183 sentences: lines checked and grouped into epochs (steps 1-4 of :mod:`.nmea`).

:func:`scan` splits a log into lines and verifies every checksum at once; :class:`Reader` takes
the good sentences (RMC, GGA, GNS, GLL, VTG, ZDA) and groups them by fix time into
:class:`Epoch` accumulators, counting everything it skips. Dating the epochs and building the
GNSS table is :func:`.nmea.read`'s.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from typing import Final

import numpy as np

__all__ = ["BANG_SENTENCE", "Epoch", "Reader", "scan"]

_OPEN_EPOCHS: Final = 4
_NO_FIX_MODES: Final = frozenset((b"N", b"S", b"M"))
_RMC_MODE_QUALITY: Final = {b"A": 1, b"D": 2, b"P": 3, b"R": 4, b"F": 5, b"E": 6}
_KMH_PER_KNOT: Final = 1.852
BANG_SENTENCE: Final = re.compile(rb"![A-Z]{5},")
# GNS mode characters (one per constellation) to the GGA quality they correspond to.
_GNS_MODE_QUALITY: Final = {
    ord("A"): 1, ord("D"): 2, ord("P"): 3, ord("R"): 4, ord("F"): 5, ord("E"): 6
}


class Epoch:
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


class Reader:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.sentences: Counter[str] = Counter()
        self.talkers: Counter[str] = Counter()
        self.epochs: list[Epoch] = []
        self.open: dict[int, Epoch] = {}
        self.current: Epoch | None = None
        self.last_date: int | None = None

    def epoch(self, tod: int) -> Epoch:
        ep = self.open.get(tod)
        if ep is None:
            ep = Epoch(tod, self.last_date)
            self.epochs.append(ep)
            self.open[tod] = ep
            if len(self.open) > _OPEN_EPOCHS:
                del self.open[next(iter(self.open))]
        self.current = ep
        return ep

    def position(self, ep: Epoch, lat: float | None, lon: float | None, ok: bool) -> bool:
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
    "RMC": Reader.rmc,
    "GGA": Reader.gga,
    "GNS": Reader.gns,
    "GLL": Reader.gll,
    "VTG": Reader.vtg,
    "ZDA": Reader.zda,
}


def scan(reader: Reader, data: bytes) -> None:
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
        if bang > dollar and BANG_SENTENCE.match(line, bang):
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
