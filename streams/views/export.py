"""A session's results as a file: ``tideway sessions export`` and
``GET /v1/sessions/{id}/export/{file}`` both answer with :func:`session_export`.

The file is one of :data:`stages.batch.export.files.EXPORTS` (``laps.csv``, ``sectors.csv``,
``delta.csv``, ``session.gpx``, ``session.fit``). Its datasets are the active run's, read from
the object store sha256-verified (the bytes ClickHouse was loaded from), by the names the run
recorded them under: the canonical streams as ``time_align``'s (``time_align.gnss``), every
other dataset by its own name (``fused``, ``laps``, ``sector_metrics``...). The pure writer
runs in a thread, off the event loop.

Scoped to the caller's tenant: another tenant's session reads as not found. A session without
an active run, or whose active run lacks a dataset the file needs (a run processed before
Tideway made sectors, a track that never closed...), is refused with ``EXPORT_UNAVAILABLE``
(HTTP 409) naming what is missing and how to get it: ``tideway sessions reprocess``.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.export.files import EXPORTS, ExportFile
from streams.errors import UsageError
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.sessions.stage_executors import record_name
from streams.views.track import active_run_datasets

__all__ = ["Export", "session_export"]

# The job whose canonical streams an export reads (the run's last, time-aligned copy).
_STREAMS_OF: Final = "time_align"


@dataclass(frozen=True, kw_only=True)
class Export:
    """One exported file: what to call it, what it is and its bytes."""

    filename: str
    media_type: str
    body: bytes


def _recorded(name: str) -> str:
    return record_name(_STREAMS_OF, name) if name in canonical.STREAMS else name


async def session_export(
    conn: Any, store: ObjectStore, tenant_id: uuid.UUID, session_id: uuid.UUID, name: str
) -> Export:
    """The export file ``name`` of the session's active run (see the module docstring)."""
    spec = EXPORTS.get(name)
    if spec is None:
        raise UsageError(f"no export {name!r}: one of {', '.join(EXPORTS)}")
    wanted = [_recorded(n) for n in (*spec.needs, *spec.uses)]
    run_id, found = await active_run_datasets(conn, tenant_id, session_id, wanted)
    if run_id is None:
        raise UsageError(
            f"session {session_id} has no processed run yet, so nothing to export: wait for "
            "its run to finish (`tideway sessions show`)", code=codes.EXPORT_UNAVAILABLE)
    missing = [n for n in spec.needs if _recorded(n) not in found]
    if missing:
        raise UsageError(_missing_text(spec, session_id, run_id, missing),
                         code=codes.EXPORT_UNAVAILABLE)  # fmt: skip
    body = await asyncio.to_thread(_make, store, spec, found)
    return Export(filename=f"session-{str(session_id)[:8]}-{spec.name}",
                  media_type=spec.media_type, body=body)  # fmt: skip


def _missing_text(
    spec: ExportFile, session_id: uuid.UUID, run_id: uuid.UUID, missing: list[str]
) -> str:
    return (
        f"{spec.name} needs the {', '.join(missing)} dataset, which session {session_id}'s "
        f"active run {run_id} does not have: the run was processed before Tideway made it, "
        f"or its job could not (see `tideway runs show {run_id}`); `tideway sessions "
        f"reprocess {session_id}` processes the session again with the current versions"
    )


def _make(store: ObjectStore, spec: ExportFile, found: dict[str, Any]) -> bytes:
    tables: dict[str, pa.Table] = {}
    for name in (*spec.needs, *spec.uses):
        row = found.get(_recorded(name))
        if row is not None:
            tables[name] = read_table(store, row["storage_url"], sha256=row["content_hash"])
    return spec.write(tables)
