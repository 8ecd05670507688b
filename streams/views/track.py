"""A session's track for drawing: the active run's downsampled GNSS series, thinned to a size a
browser draws at once (``GET /v1/sessions/{id}/track``, the console's session page).

The points come from the run's ``gnss_L1`` dataset (``gnss_L2`` when L1 is absent) - rows the
downsample jobs *selected*, never averaged, so every point was measured - read from the object
store sha256-verified, the same bytes ClickHouse was loaded from. More than
:data:`MAX_POINTS` rows are thinned by a stride, keeping the first and the last. Scoped to the
caller's tenant: another tenant's session reads as not found. ``reason`` says why there are no
points (no active run yet, or no GNSS series in the run).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Final

import pyarrow as pa

from schemas.api import SessionTrack
from streams.errors import NotFoundError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table

__all__ = ["MAX_POINTS", "active_run_datasets", "session_track"]

MAX_POINTS: Final = 4000
_LEVELS: Final = ("gnss_L1", "gnss_L2")

_ACTIVE: Final = "SELECT active_run_id FROM sessions WHERE id = $1 AND tenant_id = $2"
_DATASETS: Final = """
SELECT name, storage_url, content_hash FROM derived_datasets
WHERE run_id = $1 AND name = ANY($2::text[])
"""


async def active_run_datasets(
    conn: Any, tenant_id: uuid.UUID, session_id: uuid.UUID, names: list[str]
) -> tuple[uuid.UUID | None, dict[str, Any]]:
    """The session's active run (``None``: it has none) and its datasets among ``names``, by
    name; ``NotFoundError`` for a session the tenant does not have."""
    row = await conn.fetchrow(_ACTIVE, session_id, tenant_id)
    if row is None:
        raise NotFoundError(f"no session {session_id}")
    run_id = row["active_run_id"]
    if run_id is None:
        return None, {}
    return run_id, {r["name"]: r for r in await conn.fetch(_DATASETS, run_id, names)}


async def session_track(
    conn: Any, store: ObjectStore, tenant_id: uuid.UUID, session_id: uuid.UUID
) -> SessionTrack:
    """The track of the session's active run (see the module docstring)."""
    run_id, found = await active_run_datasets(conn, tenant_id, session_id, list(_LEVELS))
    out: dict[str, Any] = {"session_id": session_id, "run_id": run_id, "dataset": None,
                           "rows": 0, "points": [], "reason": None}  # fmt: skip
    if run_id is None:
        return SessionTrack.model_validate({**out, "reason": "NO_ACTIVE_RUN"})
    level = next((name for name in _LEVELS if name in found), None)
    if level is None:
        return SessionTrack.model_validate({**out, "reason": "NO_GNSS_SERIES"})
    ds = found[level]
    table = await asyncio.to_thread(read_table, store, ds["storage_url"], sha256=ds["content_hash"])
    points = _points(table)
    return SessionTrack.model_validate({**out, "dataset": level, "rows": table.num_rows,
                                        "points": points})  # fmt: skip


def _points(table: pa.Table) -> list[dict[str, Any]]:
    cols = table.select(["ts", "lat_deg", "lon_deg", "speed_mps"]).to_pydict()
    n = table.num_rows
    step = max(1, -(-n // MAX_POINTS))  # ceil: MAX_POINTS rows, plus the last one
    picks = list(range(0, n, step))
    if n and picks[-1] != n - 1:
        picks.append(n - 1)
    return [
        {"t": cols["ts"][i], "lat": cols["lat_deg"][i], "lon": cols["lon_deg"][i],
         "speed_mps": cols["speed_mps"][i]}
        for i in picks
        if cols["lat_deg"][i] is not None and cols["lon_deg"][i] is not None
    ]  # fmt: skip
