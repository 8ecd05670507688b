"""Local plane projection and the numeric views of canonical tables."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stages.batch.canonical import GNSS_SCHEMA
from stages.batch.geo import (
    GnssFixes,
    LocalFrame,
    Motion,
    course_deg_to_heading,
    heading_to_course_deg,
    path_distance,
    wrap_angle,
)


def test_local_frame_round_trips_and_has_true_scale() -> None:
    frame = LocalFrame(lat0_deg=47.3, lon0_deg=8.5)
    lat = np.array([47.3, 47.31, 47.29, 47.305])
    lon = np.array([8.5, 8.52, 8.47, 8.5])
    e, n = frame.to_en(lat, lon)
    lat2, lon2 = frame.to_latlon(e, n)
    assert np.allclose(lat2, lat, atol=1e-12) and np.allclose(lon2, lon, atol=1e-12)
    # WGS84: 0.01° of latitude at 47.3°N is 1112.6 m of meridian arc; 0.02° of longitude on
    # the 47.31° parallel is 1513.0 m. The local plane is within 0.1 % of both.
    assert abs(n[1] - 1112.6) < 1.0
    assert abs(e[1] - 1513.0) < 1.5


def test_heading_and_course_conventions() -> None:
    # east = course 90° = heading 0; north = course 0° = heading π/2; west = 270° = π.
    course = np.array([90.0, 0.0, 270.0, 180.0])
    heading = course_deg_to_heading(course)
    assert np.allclose(heading, [0.0, np.pi / 2, np.pi, -np.pi / 2])
    assert np.allclose(heading_to_course_deg(heading), course)
    assert np.allclose(wrap_angle(np.array([3 * np.pi, -3.5 * np.pi])), [np.pi, 0.5 * np.pi])
    assert np.allclose(path_distance(np.array([0.0, 3.0, 3.0]), np.array([0.0, 4.0, 5.0])),
                       [0.0, 5.0, 6.0])


def _gnss(rows: list[dict[str, object]]) -> pa.Table:
    cols = {f.name: [r.get(f.name) for r in rows] for f in GNSS_SCHEMA}
    return pa.Table.from_pydict(cols, schema=GNSS_SCHEMA)


def test_gnss_fixes_keep_only_real_sorted_unique_fixes() -> None:
    base = 1_717_236_000_000_000
    table = _gnss([
        {"ts": base + 200_000, "lat_deg": 52.0, "lon_deg": -1.0, "fix_quality": 1, "hdop": 0.8},
        {"ts": base, "lat_deg": 52.0, "lon_deg": -1.0, "fix_quality": 1},
        {"ts": base + 100_000, "lat_deg": 52.0, "lon_deg": -1.0, "fix_quality": 0},  # no fix
        {"ts": base + 300_000, "lat_deg": 0.0, "lon_deg": 0.0},  # null island
        {"ts": base + 200_000, "lat_deg": 52.1, "lon_deg": -1.0, "fix_quality": 1},  # dup ts
        {"ts": base + 400_000, "lat_deg": 52.0, "lon_deg": -1.0001, "speed_mps": 3.0},
    ])
    fixes = GnssFixes.from_table(table)
    assert fixes.ts_us.tolist() == [base, base + 200_000, base + 400_000]
    assert fixes.t.tolist() == [0.0, 0.2, 0.4]
    assert fixes.hdop.tolist() == [0.8, 0.8, 0.8]  # unknown HDOP → the median of known ones
    assert np.isnan(fixes.speed[0]) and fixes.speed[2] == 3.0


def test_motion_prefers_fused_then_gnss() -> None:
    base = 1_717_236_000_000_000
    gnss = _gnss([{"ts": base + i * 100_000, "lat_deg": 52.0 + i * 1e-5, "lon_deg": -1.0}
                  for i in range(5)])
    m = Motion.from_datasets({"gnss": gnss})
    assert m is not None and m.source == "gnss" and m.t.size == 5
    assert np.allclose(m.speed[1:-1], 11.13, atol=0.05)  # 1e-5° lat per 0.1 s
    fused = pa.table({"ts": gnss.column("ts"), "lat_deg": gnss.column("lat_deg"),
                      "lon_deg": gnss.column("lon_deg"), "speed_mps": [1.0] * 5})
    m2 = Motion.from_datasets({"gnss": gnss, "fused": fused})
    assert m2 is not None and m2.source == "fused" and m2.speed.tolist() == [1.0] * 5
    assert Motion.from_datasets({}) is None
