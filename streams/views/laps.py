"""The laps of a session's active run, per lap, with the start/finish line that timed them.

What a user uploads a session for: one row per complete lap (times and their uncertainty,
the rolling best, sector times, distance, speeds, pit and validity flags), the theoretical best
and the lines the crossings were timed on (configured, from a track, or found where the track
closes on itself). ``tideway sessions show --laps`` and ``GET /v1/sessions/{id}/laps`` both
answer with :func:`session_laps`.

The rows come from the run's canonical Parquet datasets on the object store (``lap_metrics``,
joined with ``laps`` for the pit details), read sha256-verified - the same bytes ClickHouse was
loaded from; the line and the reason for no laps (``TRACK_NOT_CLOSED``...) from the
``detect_laps`` job's summary, or the reason it was skipped for (``NO_POSITION_DATA``).
Everything is scoped to the caller's tenant: another tenant's session reads as not found.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Final

import pyarrow as pa

from schemas.api import LapRow, SectorTime, SessionLaps
from stages.batch.lap_datasets import LAP_METRICS_SCHEMA, LAPS_SCHEMA, SECTOR_METRICS_SCHEMA
from streams.errors import NotFoundError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table

__all__ = ["sector_time", "session_laps"]

_ACTIVE: Final = """
SELECT s.active_run_id, l.output AS laps_summary, l.skip_reason AS laps_skipped,
       m.output AS metrics_summary
FROM sessions s
LEFT JOIN LATERAL (
    SELECT j.output, j.skip_reason FROM jobs j
    WHERE j.run_id = s.active_run_id AND j.job_type = 'detect_laps'
    ORDER BY j.created_at DESC LIMIT 1
) l ON true
LEFT JOIN LATERAL (
    SELECT j.output FROM jobs j
    WHERE j.run_id = s.active_run_id AND j.job_type = 'compute_metrics'
    ORDER BY j.created_at DESC LIMIT 1
) m ON true
WHERE s.id = $1 AND s.tenant_id = $2
"""

_DATASETS: Final = """
SELECT name, storage_url, content_hash FROM derived_datasets
WHERE run_id = $1 AND name = ANY($2::text[])
"""

_NO_ACTIVE_RUN: Final = "NO_ACTIVE_RUN"


async def session_laps(
    conn: Any, store: ObjectStore, tenant_id: uuid.UUID, session_id: uuid.UUID
) -> SessionLaps:
    """The per-lap rows and the line of the session's active run (raises NotFoundError)."""
    row = await conn.fetchrow(_ACTIVE, session_id, tenant_id)
    if row is None:
        raise NotFoundError(f"no session {session_id}")
    run_id = row["active_run_id"]
    if run_id is None:
        return SessionLaps(session_id=session_id, run_id=None, line=None,
                           reason=_NO_ACTIVE_RUN, laps=[])  # fmt: skip
    summary = row["laps_summary"] or {}
    metrics = row["metrics_summary"] or {}
    found = {r["name"]: r for r in await conn.fetch(_DATASETS, run_id, list(_SCHEMAS))}
    tables = await asyncio.to_thread(_read, store, found)
    return SessionLaps(
        session_id=session_id,
        run_id=run_id,
        line=summary.get("line"),
        # A skipped detect_laps has no summary: the reason it was skipped for (an indoor
        # activity: NO_POSITION_DATA) says why there are no laps.
        reason=summary.get("reason") or row["laps_skipped"],
        laps=_rows(tables.get("laps"), tables.get("lap_metrics"), tables.get("sector_metrics")),
        finish=summary.get("finish"),
        sector_lines=summary.get("sector_lines") or [],
        track=summary.get("track"),
        reference_lap=metrics.get("reference_lap"),
        theoretical_best_s=metrics.get("theoretical_best_s"),
        theoretical_best_mini_s=metrics.get("theoretical_best_mini_s"),
    )


_SCHEMAS: Final = {"laps": LAPS_SCHEMA, "lap_metrics": LAP_METRICS_SCHEMA,
                   "sector_metrics": SECTOR_METRICS_SCHEMA}


def _read(store: ObjectStore, found: dict[str, Any]) -> dict[str, pa.Table]:
    # A run processed before a column existed (the uncertainty, the rolling best) reads
    # without it: the row's field is then null.
    out = {}
    for name, r in found.items():
        table = read_table(store, r["storage_url"], sha256=r["content_hash"])
        out[name] = table.select([c for c in _SCHEMAS[name].names if c in table.column_names])
    return out


def _rows(laps: pa.Table | None, metrics: pa.Table | None,
          sectors: pa.Table | None) -> list[LapRow]:
    if laps is None:
        return []
    by_lap = {m["lap"]: m for m in metrics.to_pylist()} if metrics is not None else {}
    sector_rows: dict[int, list[SectorTime]] = {}
    for r in sectors.to_pylist() if sectors is not None else []:
        if r["kind"] == "sector":
            sector_rows.setdefault(r["lap"], []).append(sector_time(r))
    out = []
    for lap in laps.to_pylist():
        m = by_lap.get(lap["lap"], {})
        out.append(
            LapRow(
                lap=lap["lap"],
                start=lap["start_ts"],
                end=lap["end_ts"],
                lap_time_s=lap["lap_time_s"],
                distance_m=lap["distance_m"],
                max_speed_mps=m.get("max_speed_mps"),
                avg_speed_mps=m.get("avg_speed_mps"),
                delta_to_best_s=m.get("delta_to_best_s"),
                is_best=bool(m.get("is_best", False)),
                valid=lap["valid"],
                pit=lap["pit"],
                pit_in=lap["pit_in"],
                pit_out=lap["pit_out"],
                stopped_s=lap["stopped_s"],
                lap_time_sigma_s=lap.get("lap_time_sigma_s"),
                rolling_best_s=m.get("rolling_best_s"),
                sectors=sector_rows.get(lap["lap"], []),
            )
        )
    return out


def sector_time(row: dict[str, Any]) -> SectorTime:
    return SectorTime.model_validate({k: row.get(k) for k in SectorTime.model_fields})
