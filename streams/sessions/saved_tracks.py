"""Saved tracks: an operator's timing lines per tenant, reused by every later session.

``tideway tracks add NAME --start-finish lat1,lon1,lat2,lon2 [--finish ...] [--sector ...]``
(or ``POST /v1/tracks``) stores a track (``saved_tracks``, migration 0033); ``--from-session``
takes the lines a session's active run was timed with (its ``detect_laps`` summary).

A saved track reaches ``detect_laps`` through the run, never by a lookup from inside a stage
(stages do no I/O): :func:`stamp_saved_tracks` copies the tenant's saved tracks into a new
run's config as ``tracks`` when the run is created - by an upload, a reprocess, a backfill or a
scheduled backfill - unless the config already has ``tracks``. So a run's config says which
tracks it could be timed on, its dataset keys hash them, and a retry or a reprocess of the same
config times the same lines; a tenant without saved tracks gets no ``tracks`` key at all.
``stages.batch.track_library.resolve`` then picks the track (by name or detected).

The read side returns the API's :class:`~schemas.api.KnownTrack`, to the CLI and the API alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final

import orjson

from schemas import error_codes as codes
from schemas.api import KnownTrack
from schemas.run_config import StartFinish, TrackConfig
from stages.batch import track_library
from streams.errors import NotFoundError, UsageError

__all__ = [
    "add_track",
    "get_track",
    "library_tracks",
    "list_tracks",
    "remove_track",
    "session_lines",
    "stamp_saved_tracks",
]

_COLUMNS: Final = """
s.name, s.start_finish, s.finish, s.sectors, s.from_session, s.created_by, s.created_at
"""

_UPSERT: Final = f"""
WITH saved AS (
    INSERT INTO saved_tracks AS s (tenant_id, name, start_finish, finish, sectors,
                                   from_session, created_by)
    SELECT t.id, $2, $3::text::jsonb, $4::text::jsonb, $5::text::jsonb, $6, $7
    FROM tenants t WHERE t.name = $1
    ON CONFLICT (tenant_id, name) DO UPDATE
    SET start_finish = EXCLUDED.start_finish, finish = EXCLUDED.finish,
        sectors = EXCLUDED.sectors, from_session = EXCLUDED.from_session,
        created_by = EXCLUDED.created_by, created_at = now()
    RETURNING s.*
)
SELECT {_COLUMNS} FROM saved s
"""

_LIST: Final = f"""
SELECT {_COLUMNS} FROM saved_tracks s JOIN tenants t ON t.id = s.tenant_id
WHERE t.name = $1 ORDER BY s.name
"""

_ONE: Final = f"""
SELECT {_COLUMNS} FROM saved_tracks s JOIN tenants t ON t.id = s.tenant_id
WHERE t.name = $1 AND s.name = $2
"""

_DELETE: Final = f"""
DELETE FROM saved_tracks s USING tenants t
WHERE t.id = s.tenant_id AND t.name = $1 AND s.name = $2
RETURNING {_COLUMNS}
"""

# What stamping copies into a new run's config: the tenant's tracks by name.
_OF_TENANT: Final = """
SELECT name, start_finish, finish, sectors FROM saved_tracks WHERE tenant_id = $1 ORDER BY name
"""

# The lines the session's active run was timed with (detect_laps' summary).
_TIMED_LINES: Final = """
SELECT j.output FROM sessions s JOIN tenants t ON t.id = s.tenant_id
LEFT JOIN jobs j ON j.run_id = s.active_run_id AND j.job_type = 'detect_laps'
WHERE s.id = $2 AND t.name = $1
ORDER BY j.created_at DESC NULLS LAST
LIMIT 1
"""


def _json(value: Any) -> Any:
    """A jsonb value from a connection with or without the json codec."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


def _saved(row: Any) -> KnownTrack:
    return KnownTrack(
        name=row["name"], source="saved",
        start_finish=StartFinish.model_validate(_json(row["start_finish"])),
        finish=None if row["finish"] is None else StartFinish.model_validate(
            _json(row["finish"])),
        sectors=[StartFinish.model_validate(x) for x in _json(row["sectors"]) or []],
        from_session=row["from_session"], created_by=row["created_by"],
        created_at=row["created_at"])


def _dump(line: StartFinish | None) -> str | None:
    return None if line is None else orjson.dumps(line.model_dump()).decode()


async def add_track(conn: Any, *, tenant: str, track: TrackConfig, created_by: str = "operator",
                    from_session: uuid.UUID | None = None) -> KnownTrack:
    """Save (or replace) the tenant's track ``track.name``."""
    row = await conn.fetchrow(
        _UPSERT, tenant, track.name, _dump(track.start_finish), _dump(track.finish),
        orjson.dumps([x.model_dump() for x in track.sectors]).decode(), from_session,
        created_by)
    if row is None:
        raise NotFoundError(f"no tenant {tenant!r}")
    return _saved(row)


async def list_tracks(conn: Any, tenant: str) -> list[KnownTrack]:
    """The tenant's saved tracks, by name."""
    return [_saved(r) for r in await conn.fetch(_LIST, tenant)]


def library_tracks() -> list[KnownTrack]:
    """The library's tracks (shipped with Tideway), by id."""
    return [
        KnownTrack(name=t.name, source="library", start_finish=t.start_finish,
                   finish=t.finish, sectors=list(t.sectors), key=t.key, reference=t.reference)
        for t in track_library.library()
    ]


async def get_track(conn: Any, tenant: str, name: str) -> KnownTrack:
    """The tenant's saved track ``name``, else the library's of that name or id (any case)."""
    row = await conn.fetchrow(_ONE, tenant, name)
    if row is not None:
        return _saved(row)
    found = track_library.by_name(name)
    if found is None:
        raise NotFoundError(f"tenant {tenant!r} has no track {name!r}")
    return next(t for t in library_tracks() if t.key == found.key)


async def remove_track(conn: Any, tenant: str, name: str) -> KnownTrack:
    """Delete the tenant's saved track ``name`` and return it (runs already stamped keep their
    copy)."""
    row = await conn.fetchrow(_DELETE, tenant, name)
    if row is None:
        raise NotFoundError(f"tenant {tenant!r} has no saved track {name!r}")
    return _saved(row)


async def session_lines(conn: Any, tenant: str, session_id: uuid.UUID,
                        name: str) -> TrackConfig:
    """The lines the session's active run was timed with, as a track called ``name``.

    ``detect_laps``' summary has ``line`` (the start/finish, configured, saved, library or
    found); ``finish`` and ``sector_lines`` where the run timed them."""
    output = await conn.fetchval(_TIMED_LINES, tenant, session_id)
    summary = _json(output) if output is not None else None
    if summary is None:
        exists = await conn.fetchval(
            "SELECT 1 FROM sessions s JOIN tenants t ON t.id = s.tenant_id"
            " WHERE t.name = $1 AND s.id = $2", tenant, session_id)
        if exists is None:
            raise NotFoundError(f"no session {session_id} for tenant {tenant}")
        raise UsageError(f"session {session_id} has no finished lap detection to take "
                         "lines from", code=codes.NO_TIMED_LINE)
    line = summary.get("line")
    if not isinstance(line, Mapping):
        raise UsageError(f"session {session_id} was timed at no line "
                         f"({summary.get('reason') or 'no laps'})", code=codes.NO_TIMED_LINE)

    def _line(data: Mapping[str, Any]) -> StartFinish:
        return StartFinish.model_validate({k: data[k] for k in ("lat1", "lon1", "lat2", "lon2")})

    finish = summary.get("finish")
    return TrackConfig(
        name=name, start_finish=_line(line),
        finish=_line(finish) if isinstance(finish, Mapping) else None,
        sectors=[_line(x) for x in summary.get("sector_lines") or [] if isinstance(x, Mapping)])


async def stamp_saved_tracks(conn: Any, tenant_id: uuid.UUID,
                             config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the tenant's saved tracks as ``tracks`` (see the module docstring):
    unchanged when it already has ``tracks`` or the tenant has none. Every path that creates a
    run from a config calls this, in the transaction that creates it."""
    out = dict(config)
    if "tracks" in out:
        return out
    rows = await conn.fetch(_OF_TENANT, tenant_id)
    if rows:
        out["tracks"] = [
            TrackConfig(name=r["name"],
                        start_finish=StartFinish.model_validate(_json(r["start_finish"])),
                        finish=None if r["finish"] is None
                        else StartFinish.model_validate(_json(r["finish"])),
                        sectors=[StartFinish.model_validate(x) for x in _json(r["sectors"])],
                        ).model_dump(exclude_none=True)
            for r in rows
        ]
    return out
