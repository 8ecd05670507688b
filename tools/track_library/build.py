"""Build ``stages/batch/tracks.json``, the track library, from circuit outlines:
``python tools/track_library/build.py SOURCES_DIR`` (never run by CI - the library is data,
committed as built).

The sources are GeoJSON files of Tomislav Bacinger's "Formula 1 circuits" repository
(https://github.com/bacinger/f1-circuits, MIT licence, copyright notice in
``LICENSE-f1-circuits.md`` beside this script), ``circuits/<id>.geojson`` at the commits
:data:`CIRCUITS` names; they are not kept in this repository - fetch them into ``SOURCES_DIR``
to rebuild. Each is one closed ``LineString`` of the circuit's centreline, in lon/lat.

Per circuit the build derives, in a local east/north plane around it:

- **centreline**: the outline with the closing duplicate vertex dropped, simplified by
  Douglas-Peucker to ``SIMPLIFY_M`` (so it stays within that of the source), oriented in the
  circuit's driving direction (all nine run clockwise), rounded to six decimals (~0.1 m);
- **start/finish**: perpendicular to the centreline at its first vertex, ``HALF_WIDTH_M`` each
  side. The source does not say where its outlines begin; for the nine kept here the first
  vertex lies on the pit straight, but not necessarily on the official timing line, so the
  line is approximate by up to some tens of metres (a run config's ``start_finish`` is exact);
- **sectors**: two lines the same way at 1/3 and 2/3 of the lap's length (three sectors), moved
  forward along the track until the line crosses the centreline only once (a line across a
  hairpin would also cut the other leg).

Every line is checked to cross the closed centreline exactly once.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from stages.batch.geo import LocalFrame, path_distance

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "stages" / "batch" / "tracks.json"
REPO = "https://github.com/bacinger/f1-circuits"
SIMPLIFY_M = 1.0
HALF_WIDTH_M = 25.0

# id -> (driving direction, the source's commit read): the direction is public knowledge of
# each circuit (all nine run clockwise), the commit the version the sources were read from.
CIRCUITS = {
    "gb-1948": ("clockwise", "3f2e2c1a40d71a9c86206f73018e8f877d06909a"),
    "be-1925": ("clockwise", "b37cc90ccdc41553fda91fc2a1f2c186b28fdc1a"),
    "it-1922": ("clockwise", "0fceca193ce88152bc5c2ea8843888803584fc6e"),
    "at-1969": ("clockwise", "73e096c62288d977b7f31f6449efc7ed2c0a01fe"),
    "nl-1948": ("clockwise", "6cb0a960e0c8eb3f4e95dc29addd34b7b80d30a8"),
    "hu-1986": ("clockwise", "8b9544e38335af1bc54655c76f48ce82a7be1954"),
    "mc-1929": ("clockwise", "53bf42718bc4f16d715045eda24a47f88af05f09"),
    "es-1991": ("clockwise", "0d958c40116b25742be76a7573b44e0940a6dfc7"),
    "de-1932": ("clockwise", "3481a053d9cad1d81276f3c47995fe4b21c5eaa7"),
}


def _douglas_peucker(pts: np.ndarray, tol: float) -> list[int]:
    """Indices of the vertices Douglas-Peucker keeps (iterative; endpoints always kept)."""
    keep = {0, len(pts) - 1}
    stack = [(0, len(pts) - 1)]
    while stack:
        a, b = stack.pop()
        if b - a < 2:
            continue
        seg = pts[b] - pts[a]
        rel = pts[a + 1:b] - pts[a]
        norm = float(np.hypot(*seg))
        if norm == 0.0:
            dist = np.hypot(rel[:, 0], rel[:, 1])
        else:
            dist = np.abs(seg[0] * rel[:, 1] - seg[1] * rel[:, 0]) / norm
        i = int(np.argmax(dist))
        if dist[i] > tol:
            k = a + 1 + i
            keep.add(k)
            stack += [(a, k), (k, b)]
    return sorted(keep)


def _point_at(e: np.ndarray, n: np.ndarray, d: np.ndarray, s: float) -> tuple[float, float]:
    return float(np.interp(s, d, e)), float(np.interp(s, d, n))


def _line_at(e: np.ndarray, n: np.ndarray, d: np.ndarray, s: float) -> np.ndarray:
    """A segment across the closed centreline at distance ``s``: ((e1, n1), (e2, n2)), left
    point first (seen in the driving direction)."""
    length = float(d[-1])
    pe, pn = _point_at(e, n, d, s % length)
    ae, an = _point_at(e, n, d, (s - 10.0) % length)
    be, bn = _point_at(e, n, d, (s + 10.0) % length)
    te, tn = be - ae, bn - an
    norm = math.hypot(te, tn)
    le, ln = -tn / norm * HALF_WIDTH_M, te / norm * HALF_WIDTH_M
    return np.array([[pe + le, pn + ln], [pe - le, pn - ln]])


def _crossings(line: np.ndarray, e: np.ndarray, n: np.ndarray) -> int:
    """How often the closed polyline (e, n) crosses the segment ``line``."""
    (e1, n1), (e2, n2) = line
    de, dn = e2 - e1, n2 - n1
    side = de * (n - n1) - dn * (e - e1)
    side = np.where(side == 0.0, 1e-9, side)  # a vertex on the line is on one side of it
    idx = np.flatnonzero(np.sign(side[:-1]) * np.sign(side[1:]) < 0)
    frac = side[idx] / (side[idx] - side[idx + 1])
    pe = e[idx] + frac * (e[idx + 1] - e[idx])
    pn = n[idx] + frac * (n[idx + 1] - n[idx])
    u = ((pe - e1) * de + (pn - n1) * dn) / (de * de + dn * dn)
    return int(np.count_nonzero((u >= 0) & (u <= 1)))


def _line_json(frame: LocalFrame, line: np.ndarray) -> dict[str, float]:
    lat, lon = frame.to_latlon(line[:, 0], line[:, 1])
    return {"lat1": round(float(lat[0]), 6), "lon1": round(float(lon[0]), 6),
            "lat2": round(float(lat[1]), 6), "lon2": round(float(lon[1]), 6)}


def build_one(path: Path) -> dict[str, object]:
    doc = json.loads(path.read_text())
    feature = doc["features"][0]
    props = feature["properties"]
    direction, commit = CIRCUITS[props["id"]]
    coords = np.asarray(feature["geometry"]["coordinates"], dtype=np.float64)
    lon, lat = coords[:, 0], coords[:, 1]
    frame = LocalFrame.around(lat, lon)
    e, n = frame.to_en(lat, lon)
    if math.hypot(e[-1] - e[0], n[-1] - n[0]) > 30.0:
        raise SystemExit(f"{path.name}: the outline does not close")
    e, n = e[:-1], n[:-1]  # the closing vertex repeats (or nearly repeats) the first
    area = 0.5 * float(np.sum(e * np.roll(n, -1) - np.roll(e, -1) * n))
    if (area < 0) != (direction == "clockwise"):  # keep the first vertex, reverse the rest
        print(f"{path.name}: reversed to run {direction}")
        e, n = np.concatenate(([e[0]], e[:0:-1])), np.concatenate(([n[0]], n[:0:-1]))
    ring = np.column_stack([np.append(e, e[0]), np.append(n, n[0])])
    kept = _douglas_peucker(ring, SIMPLIFY_M)
    ring = ring[kept]
    ce, cn = ring[:, 0], ring[:, 1]
    d = path_distance(ce, cn)
    length = float(d[-1])
    start = _line_at(ce, cn, d, 0.0)
    lines = [start]
    for third in (1, 2):
        s = third * length / 3.0
        for _ in range(40):
            line = _line_at(ce, cn, d, s)
            if _crossings(line, ce, cn) == 1:
                break
            s += 5.0
        lines.append(line)
    for line in lines:
        if _crossings(line, ce, cn) != 1:
            raise SystemExit(f"{path.name}: a line does not cross the track exactly once")
    clat, clon = frame.to_latlon(ce[:-1], cn[:-1])
    return {
        "id": props["id"],
        "name": props["Name"],
        "location": props["Location"],
        "country": props["id"][:2].upper(),
        "length_m": round(length, 1),
        "direction": direction,
        "source": f"{REPO}/blob/{commit}/circuits/{path.name} (MIT, © Tomislav Bacinger)",
        "start_finish": _line_json(frame, start),
        "sectors": [_line_json(frame, x) for x in lines[1:]],
        "centreline": [[round(float(a), 6), round(float(b), 6)] for a, b in zip(clat, clon,
                                                                                strict=True)],
    }


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: build.py SOURCES_DIR (the circuits' GeoJSON files)")
    tracks = [build_one(Path(sys.argv[1]) / f"{key}.geojson") for key in sorted(CIRCUITS)]
    doc = {
        "attribution": ("Circuit outlines from 'Formula 1 circuits' by Tomislav Bacinger, "
                        f"{REPO}, MIT licence (Copyright (c) 2019-2022 Tomislav Bacinger). "
                        "Start/finish and sector lines derived by Tideway "
                        "(tools/track_library/build.py); approximate, not official timing "
                        "lines."),
        "licence": "MIT",
        "tracks": tracks,
    }
    # One line per centreline: the file stays readable without a line per coordinate.
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    for t in tracks:
        pretty = json.dumps(t["centreline"], indent=1)
        pretty = "\n".join("   " + x if i else x for i, x in enumerate(pretty.splitlines()))
        text = text.replace(pretty, json.dumps(t["centreline"], separators=(",", ":")), 1)
    OUT.write_text(text + "\n")
    for t in tracks:
        print(f"{t['id']}: {t['name']}, {t['length_m']} m, {len(t['centreline'])} points")


if __name__ == "__main__":
    main()
