"""One lap's speed over distance, for overlaying laps (``GET /v1/sessions/{id}/laps/{lap}/trace``,
the console's lap comparison).

The lap's times come from the active run's ``laps`` dataset; its points from the downsampled
GNSS series (``gnss_L1``, ``gnss_L2`` when L1 is absent - rows the downsample jobs selected, so
every point was measured), both read from the object store sha256-verified. Distance is
measured from the lap's start crossing the way the lap's own ``distance_m`` is: the speed
integrated over time (:func:`stages.batch.geo.travelled`), so two laps line up by distance
driven, not by the zig-zag of noisy fixes. More than :data:`MAX_POINTS` points are thinned by a
stride, keeping the first and the last. The lap's corners, straights and jumps (the run's
``segments`` dataset, when detect_segments ran) come along, placed on the same distance axis, so
the console can mark them under the lines. Scoped to the caller's tenant: another tenant's session,
or a lap the run does not have, reads as not found.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.api import LapTrace
from stages.batch.geo import column_f64, travelled, ts_micros
from streams.errors import NotFoundError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.views.track import active_run_datasets

__all__ = ["MAX_POINTS", "lap_trace"]

MAX_POINTS: Final = 1500
_LEVELS: Final = ("gnss_L1", "gnss_L2")



async def lap_trace(
    conn: Any, store: ObjectStore, tenant_id: uuid.UUID, session_id: uuid.UUID, lap: int
) -> LapTrace:
    """Lap ``lap`` of the session's active run as speed over distance (see the module docstring)."""
    run_id, found = await active_run_datasets(
        conn, tenant_id, session_id, ["laps", "segments", *_LEVELS]
    )
    if run_id is None:
        raise NotFoundError(f"session {session_id} has no active run, so no lap {lap}")
    level = next((name for name in _LEVELS if name in found), None)
    if "laps" not in found:
        raise NotFoundError(f"the session's active run has no lap {lap}")
    read = [found["laps"]] + [found[n] for n in (level, "segments") if n in found]
    tables = await asyncio.to_thread(
        lambda: [read_table(store, r["storage_url"], sha256=r["content_hash"]) for r in read]
    )
    laps = tables[0].filter(pc.equal(tables[0].column("lap"), lap)).to_pylist()
    if not laps:
        raise NotFoundError(f"the session's active run has no lap {lap}")
    out: dict[str, Any] = {"session_id": session_id, "run_id": run_id, "lap": lap,
                           "lap_time_s": laps[0]["lap_time_s"], "dataset": level,
                           "points": [], "segments": [], "reason": None}  # fmt: skip
    if level is None:
        return LapTrace.model_validate({**out, "reason": "NO_GNSS_SERIES"})
    lo, hi = (_micros(laps[0][k]) for k in ("start_ts", "end_ts"))
    series = tables[1]
    ts = ts_micros(series)
    keep = (ts >= lo) & (ts <= hi)
    t = (ts[keep] - lo) / 1e6
    speed = column_f64(series, "speed_mps")[keep]
    dist = travelled(t, speed)
    segments = tables[2] if len(tables) > 2 else None
    return LapTrace.model_validate({**out, "points": _points(t, dist, speed),
                                    "segments": _segments(segments, lap, lo, t, dist)})  # fmt: skip


def _micros(value: Any) -> int:
    return int(pa.scalar(value, pa.timestamp("us", tz="UTC")).value)


def _segments(
    table: pa.Table | None, lap: int, lo: int, t: np.ndarray, dist: np.ndarray
) -> list[dict[str, Any]]:
    """The lap's segments with their start, apex and end as distance into the lap."""
    if table is None or t.size < 2 or not np.isfinite(dist).all():
        return []
    rows = table.filter(pc.equal(table.column("lap"), lap)).to_pylist()

    def at(value: Any) -> float | None:
        return None if value is None else float(np.interp((_micros(value) - lo) / 1e6, t, dist))

    return [
        {"segment_id": r["segment_id"], "kind": r["kind"], "direction": r["direction"],
         "start_m": at(r["start_ts"]), "apex_m": at(r["apex_ts"]), "end_m": at(r["end_ts"]),
         "heading_change_deg": r["heading_change_deg"]}
        for r in rows
    ]  # fmt: skip


def _points(t: np.ndarray, dist: np.ndarray, speed: np.ndarray) -> list[dict[str, float]]:
    n = int(t.size)
    step = max(1, -(-n // MAX_POINTS))  # ceil: MAX_POINTS rows, plus the last one
    picks = list(range(0, n, step))
    if n and picks[-1] != n - 1:
        picks.append(n - 1)
    return [
        {"t_s": float(t[i]), "d_m": float(dist[i]), "speed_mps": float(speed[i])}
        for i in picks
        if np.isfinite(dist[i]) and np.isfinite(speed[i])
    ]
