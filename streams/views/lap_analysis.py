"""One lap against the session's reference lap (``GET /v1/sessions/{id}/laps/{lap}/analysis``,
``tideway sessions lap``, the console's delta chart and corner table).

The rows come from the active run's ``lap_delta``, ``corner_metrics`` and ``sector_metrics``
datasets (``compute_metrics``; see :mod:`stages.batch.lap_analysis` for how they are measured),
read sha256-verified from the object store; the lap times from ``laps``. The delta channel is
thinned to at most :data:`MAX_POINTS` points by a stride that keeps its last point (the
lap-time difference). A run processed before the lap analysis existed has no such datasets:
the answer says ``NOT_ANALYSED`` (reprocessing the session adds them). Scoped to the caller's
tenant: another tenant's session, or a lap the run does not have, reads as not found.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from schemas.api import LapAnalysis
from stages.batch.lap_analysis import NO_REFERENCE_LAP
from streams.errors import NotFoundError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.views.laps import sector_time
from streams.views.track import active_run_datasets

__all__ = ["MAX_POINTS", "lap_analysis"]

MAX_POINTS: Final = 2000
_NAMES: Final = ("laps", "lap_delta", "corner_metrics", "sector_metrics")
NOT_ANALYSED: Final = "NOT_ANALYSED"


async def lap_analysis(
    conn: Any, store: ObjectStore, tenant_id: uuid.UUID, session_id: uuid.UUID, lap: int
) -> LapAnalysis:
    """Lap ``lap`` of the session's active run against its reference lap."""
    run_id, found = await active_run_datasets(conn, tenant_id, session_id, list(_NAMES))
    if run_id is None:
        raise NotFoundError(f"session {session_id} has no active run, so no lap {lap}")
    if "laps" not in found:
        raise NotFoundError(f"the session's active run has no lap {lap}")

    def read() -> dict[str, pa.Table]:
        return {name: _only(read_table(store, r["storage_url"], sha256=r["content_hash"]), lap)
                for name, r in found.items()}

    tables = await asyncio.to_thread(read)
    laps = tables["laps"].to_pylist()
    if not laps:
        raise NotFoundError(f"the session's active run has no lap {lap}")
    out: dict[str, Any] = {"session_id": session_id, "run_id": run_id, "lap": lap,
                           "lap_time_s": laps[0]["lap_time_s"], "reference_lap": None,
                           "reference_lap_time_s": None, "delta": [], "corners": [],
                           "mini_sectors": [], "reason": None}  # fmt: skip
    if "lap_delta" not in tables:
        return LapAnalysis.model_validate({**out, "reason": NOT_ANALYSED})
    delta = tables["lap_delta"].to_pylist()
    mini = [r for r in tables.get("sector_metrics", _EMPTY).to_pylist() if r["kind"] == "mini"]
    out["mini_sectors"] = [sector_time(r) for r in mini]
    if not delta:
        return LapAnalysis.model_validate({**out, "reason": NO_REFERENCE_LAP})
    ref = int(delta[0]["reference_lap"])
    ref_time = laps[0]["lap_time_s"] - delta[-1]["delta_s"]
    step = max(1, -(-len(delta) // MAX_POINTS))
    picks = sorted({*range(0, len(delta), step), len(delta) - 1})
    points = [{"d_m": delta[i]["distance_m"], "t_s": delta[i]["time_s"],
               "delta_s": delta[i]["delta_s"], "speed_mps": delta[i]["speed_mps"]}
              for i in picks]  # fmt: skip
    corners = [{k: r[k] for k in (
        "corner", "direction", "start_m", "end_m", "braking_m", "apex_m", "entry_speed_mps",
        "apex_speed_mps", "exit_speed_mps", "time_delta_s")}
        for r in tables.get("corner_metrics", _EMPTY).to_pylist()]  # fmt: skip
    return LapAnalysis.model_validate({**out, "reference_lap": ref,
                                       "reference_lap_time_s": ref_time, "delta": points,
                                       "corners": corners})  # fmt: skip


_EMPTY: Final = pa.table({"lap": pa.array([], pa.int32()), "kind": pa.array([], pa.string())})


def _only(table: pa.Table, lap: int) -> pa.Table:
    return table.filter(pc.equal(table.column("lap"), lap))
