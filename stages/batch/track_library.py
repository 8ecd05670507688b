"""Known tracks: the library shipped as data, the tenant's saved tracks, and which one a
session was driven on.

Theory of operation
-------------------
A :class:`Track` is a named set of timing lines: a start/finish line, for a point-to-point
stage (a hill climb, a rally stage) a separate ``finish`` line, and sector lines in driving
order. Tracks come from three places, in this order of precedence (:func:`resolve`):

1. **config** - the run config's own ``start_finish`` (with ``finish`` and ``sectors``);
2. **by name** - ``config.track`` names a saved track (``config.tracks``, stamped into the run
   when it was created) or a library track (name, id or location, any case); ``"none"`` times
   no known track; an unknown name is ``SessionStageError`` ``UNKNOWN_TRACK``;
3. **detected** - otherwise the session's own positions decide, among the saved tracks first,
   then the library (:func:`detect`). Nothing detected: ``None``, and ``detect_laps`` finds a
   line of its own where the path closes on itself.

**The library** (``tracks.json`` beside this module, built by
``tools/track_library/build.py``) holds nine Formula 1 circuits whose outlines come from
github.com/bacinger/f1-circuits (MIT licence, attribution in the file and in each track's
``reference``): each with a centreline, an approximate start/finish line at the outline's first
vertex and sector lines at a third and two thirds of the lap.

**Detection.** Only moving samples count (speed at least ``MOVING_MPS``: a car parked in the
paddock is on no track). A candidate is considered when its bounding box is within
``NEAR_M`` of the session's (a cheap test that leaves the rest of the world out). It matches
when

- the moving path crosses its start/finish line at least twice in one direction (a circuit),
  or crosses its start line and later its finish line (a stage); and
- for a track with a centreline, at least ``ON_TRACK_SHARE`` of the moving samples lie within
  ``ON_TRACK_M`` of it (measured against the centreline densified to ``DENSIFY_M`` with a
  k-d tree in a local east/north plane). A saved track has no centreline; its lines alone
  decide, and they were drawn across the tenant's own track.

Of several matches the one with the larger on-track share wins (a saved track counts as 1).
A random loop that happens to cross a library line, or a road that passes a circuit, matches
nothing: its path is not the circuit's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

import numpy as np

from schemas import error_codes as codes
from schemas.run_config import RunConfig, StartFinish, TrackConfig
from stages.batch.contract import SessionStageError
from stages.batch.geo import FloatArray, LocalFrame, path_distance

__all__ = [
    "MOVING_MPS",
    "NEAR_M",
    "ON_TRACK_M",
    "ON_TRACK_SHARE",
    "Track",
    "TrackSource",
    "attribution",
    "by_name",
    "detect",
    "library",
    "resolve",
]

TrackSource = Literal["library", "saved", "config"]

MOVING_MPS = 1.0
"""A sample at least this fast is moving (and counts for detection)."""
NEAR_M = 5000.0
"""A candidate whose bounding box is farther than this from the session's is not considered."""
ON_TRACK_M = 30.0
"""A moving sample this close to a centreline is on it (a track's width plus GNSS error)."""
ON_TRACK_SHARE = 0.8
"""Share of the moving samples that must be on a centreline for its track to match."""
DENSIFY_M = 5.0
_MIN_MOVING = 20
_MAX_QUERIED = 5000  # moving samples tested against a centreline, evenly spread
_M_PER_DEG = 111_195.0  # a degree of latitude (mean Earth radius), for the cheap box test
_NONE = "none"

_EMPTY: FloatArray = np.zeros(0)


@dataclass(frozen=True, kw_only=True)
class Track:
    """A track's timing lines (WGS84), and its centreline when it is known.

    ``finish`` set: a point-to-point stage, timed from crossing ``start_finish`` to crossing
    ``finish``; unset: a circuit, a lap from one crossing of ``start_finish`` to the next.
    ``sectors`` are the lines between, in driving order. ``centreline`` is ``(lat, lon)``
    arrays (empty for a saved or configured track); ``key`` a library track's id
    (``gb-1948``) and ``reference`` where its geometry comes from.
    """

    name: str
    source: TrackSource
    start_finish: StartFinish
    finish: StartFinish | None = None
    sectors: tuple[StartFinish, ...] = ()
    centreline: tuple[FloatArray, FloatArray] = field(
        default=(_EMPTY, _EMPTY), compare=False, repr=False)
    key: str | None = None
    reference: str | None = None

    @property
    def point_to_point(self) -> bool:
        """A stage with its own finish line (not a circuit)."""
        return self.finish is not None

    @classmethod
    def from_config(cls, cfg: TrackConfig, source: TrackSource = "saved") -> Track:
        """A saved track (a run config's ``tracks`` item) as a :class:`Track`."""
        return cls(name=cfg.name, source=source, start_finish=cfg.start_finish,
                   finish=cfg.finish, sectors=tuple(cfg.sectors))

    def to_config(self) -> TrackConfig:
        """The track's lines as a saved track (``TrackConfig``), e.g. to save a library
        track's lines under a name of the tenant's."""
        return TrackConfig(name=self.name, start_finish=self.start_finish,
                           finish=self.finish, sectors=list(self.sectors))


# --- the library ------------------------------------------------------------------------------


@cache
def _document() -> dict[str, Any]:
    text = resources.files("stages.batch").joinpath("tracks.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def library() -> tuple[Track, ...]:
    """The library's tracks, by id (read once from the packaged ``tracks.json``)."""
    out = []
    for item in _document()["tracks"]:
        pts = np.asarray(item["centreline"], dtype=np.float64).reshape(-1, 2)
        out.append(Track(
            name=item["name"], source="library", key=item["id"], reference=item["source"],
            start_finish=StartFinish(**item["start_finish"]),
            finish=StartFinish(**item["finish"]) if item.get("finish") else None,
            sectors=tuple(StartFinish(**x) for x in item["sectors"]),
            centreline=(pts[:, 0].copy(), pts[:, 1].copy())))
    return tuple(out)


def attribution() -> str:
    """Where the library's geometry comes from and under which licence."""
    return str(_document()["attribution"])


def by_name(name: str, saved: Sequence[TrackConfig] = ()) -> Track | None:
    """The saved track called ``name``, else the library track with that name, id or
    location (case-insensitive), else ``None``."""
    want = name.strip().casefold()
    for cfg in saved:
        if cfg.name.casefold() == want:
            return Track.from_config(cfg)
    for track in library():
        location = _location(track)
        if want in {track.name.casefold(), (track.key or "").casefold(), location}:
            return track
    return None


def _location(track: Track) -> str:
    for item in _document()["tracks"]:
        if item["id"] == track.key:
            return str(item["location"]).casefold()
    return ""


# --- precedence -------------------------------------------------------------------------------


def resolve(config: RunConfig, lat: FloatArray, lon: FloatArray,
            speed: FloatArray) -> Track | None:
    """The track a session is timed on (module docstring: config, by name, detected), or
    ``None`` for ``detect_laps`` to find a line of its own."""
    if config.start_finish is not None:
        return Track(name="config", source="config", start_finish=config.start_finish,
                     finish=config.finish, sectors=tuple(config.sectors))
    if config.track is not None:
        if config.track.strip().casefold() == _NONE:
            return None
        found = by_name(config.track, config.tracks)
        if found is None:
            raise SessionStageError(
                f"config.track: no saved or library track is called {config.track!r}",
                code=codes.UNKNOWN_TRACK)
        return found
    saved = tuple(Track.from_config(t) for t in config.tracks)
    return detect(lat, lon, speed, saved) or detect(lat, lon, speed, library())


# --- detection --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Path:
    """The session's moving samples in a local plane."""

    frame: LocalFrame
    e: FloatArray
    n: FloatArray
    box: tuple[float, float, float, float]  # lat min, lat max, lon min, lon max


def detect(lat: FloatArray, lon: FloatArray, speed: FloatArray,
           candidates: Sequence[Track]) -> Track | None:
    """The candidate the session was driven on (module docstring), or ``None``.

    ``lat``/``lon`` in degrees and ``speed`` in m/s, one per sample in time order (NaN where
    unknown: such a sample is not moving)."""
    lat, lon = np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)
    moving = np.isfinite(lat) & np.isfinite(lon) & (np.nan_to_num(speed) >= MOVING_MPS)
    if np.count_nonzero(moving) < _MIN_MOVING or not candidates:
        return None
    la, lo = lat[moving], lon[moving]
    frame = LocalFrame.around(la, lo)
    e, n = frame.to_en(la, lo)
    path = _Path(frame=frame, e=e, n=n,
                 box=(float(la.min()), float(la.max()), float(lo.min()), float(lo.max())))
    best: Track | None = None
    best_share = -1.0
    for track in candidates:
        share = _match(track, path)
        if share is not None and share > best_share:
            best, best_share = track, share
    return best


def _match(track: Track, path: _Path) -> float | None:
    """The share of the path on ``track`` when it matches, else ``None``."""
    lat, lon = track.centreline
    if lat.size == 0:
        lines = [track.start_finish, *([track.finish] if track.finish else [])]
        lat = np.array([x for ln in lines for x in (ln.lat1, ln.lat2)])
        lon = np.array([x for ln in lines for x in (ln.lon1, ln.lon2)])
    if _box_gap_m(path.box, lat, lon) > NEAR_M:
        return None
    if not _crosses(track, path):
        return None
    if track.centreline[0].size == 0:
        return 1.0
    share = _on_track_share(track, path)
    return share if share >= ON_TRACK_SHARE else None


def _box_gap_m(box: tuple[float, float, float, float], lat: FloatArray,
               lon: FloatArray) -> float:
    lat_gap = max(float(lat.min()) - box[1], box[0] - float(lat.max()), 0.0)
    lon_gap = max(float(lon.min()) - box[3], box[2] - float(lon.max()), 0.0)
    lon_gap = min(lon_gap, 360.0 - lon_gap)
    cos_lat = math.cos(math.radians(0.5 * (box[0] + box[1])))
    return math.hypot(lat_gap * _M_PER_DEG, lon_gap * _M_PER_DEG * cos_lat)


def _crossing_signs(line: StartFinish, path: _Path) -> tuple[FloatArray, FloatArray]:
    """(sample index, direction ±1) of every crossing of the segment ``line``."""
    le, ln = path.frame.to_en(np.array([line.lat1, line.lat2]), np.array([line.lon1, line.lon2]))
    de, dn = float(le[1] - le[0]), float(ln[1] - ln[0])
    side = de * (path.n - ln[0]) - dn * (path.e - le[0])
    side = np.where(side == 0.0, 1e-9, side)
    idx = np.flatnonzero(np.sign(side[:-1]) != np.sign(side[1:]))
    frac = side[idx] / (side[idx] - side[idx + 1])
    pe = path.e[idx] + frac * (path.e[idx + 1] - path.e[idx])
    pn = path.n[idx] + frac * (path.n[idx + 1] - path.n[idx])
    u = ((pe - le[0]) * de + (pn - ln[0]) * dn) / (de * de + dn * dn)
    keep = (u >= 0.0) & (u <= 1.0)
    return idx[keep].astype(np.float64), np.sign(side[idx + 1][keep])


def _crosses(track: Track, path: _Path) -> bool:
    at, sign = _crossing_signs(track.start_finish, path)
    if track.finish is None:
        return int(max(np.count_nonzero(sign > 0), np.count_nonzero(sign < 0))) >= 2
    end, _ = _crossing_signs(track.finish, path)
    return at.size > 0 and end.size > 0 and float(end.max()) > float(at.min())


def _on_track_share(track: Track, path: _Path) -> float:
    ce, cn = path.frame.to_en(*track.centreline)
    if track.finish is None:  # a circuit: its outline closes
        ce, cn = np.append(ce, ce[0]), np.append(cn, cn[0])
    d = path_distance(ce, cn)
    grid = np.linspace(0.0, float(d[-1]), max(math.ceil(float(d[-1]) / DENSIFY_M) + 1, 2))
    # Imported here: this module is imported by every CLI start (saved tracks), and
    # scipy.spatial alone took 0.32 s of its 2.0 s of imports.
    from scipy.spatial import cKDTree

    tree = cKDTree(np.column_stack([np.interp(grid, d, ce), np.interp(grid, d, cn)]))
    step = max(1, path.e.size // _MAX_QUERIED)
    dist, _ = tree.query(np.column_stack([path.e[::step], path.n[::step]]),
                         distance_upper_bound=ON_TRACK_M)
    return float(np.mean(np.isfinite(dist)))
