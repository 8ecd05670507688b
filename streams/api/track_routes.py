"""Tracks: the caller's saved tracks and the library's (``tideway tracks``).

A saved track is the tenant's own (row-level security: another tenant's name is "not found",
as a name nobody saved is); library tracks are everyone's, so ``GET /v1/tracks/{track}`` finds
one by name or id after the caller's own, and ``GET /v1/tracks?include=all`` lists them after
the caller's. Each handler calls the function the CLI command calls.
"""

from __future__ import annotations

from aiohttp import web

from schemas.api import (
    TRACK_NAME_PATTERN,
    KnownTrack,
    NewTrack,
    TrackFromSession,
    TrackPage,
    TrackQuery,
)
from schemas.run_config import TrackConfig
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.api.openapi import Route
from streams.api.path_params import PathParam
from streams.sessions import saved_tracks

__all__ = ["ROUTES", "add_track", "get_track", "list_tracks", "remove_track"]

TRACK = PathParam(
    pattern=TRACK_NAME_PATTERN,
    must_be="a track name (letters, digits, spaces and ._()'-, at most 100)",
    description="A saved track's name, or a library track's name or id (`gb-1948`).",
)
_NO_TRACK = "no such track"


async def list_tracks(request: web.Request) -> web.Response:
    """The caller's saved tracks by name, then (``include=all``) the library's."""
    caller, q = caller_of(request), query_of(request, TrackQuery)
    async with context_of(request).pool.acquire() as conn:
        found = await saved_tracks.list_tracks(conn, caller.tenant)
    if q.include == "all":
        found = [*found, *saved_tracks.library_tracks()]
    return reply(TrackPage(items=found, next=None))


async def get_track(request: web.Request) -> web.Response:
    caller, name = caller_of(request), path_text(request, "track")
    async with context_of(request).pool.acquire() as conn:
        track = await saved_tracks.get_track(conn, caller.tenant, name)
    return reply(track)


async def add_track(request: web.Request) -> web.Response:
    """Save a track: its lines, or those a session's active run was timed with."""
    caller, body = caller_of(request), (await body_of(request, NewTrack)).root
    from_session = body.from_session if isinstance(body, TrackFromSession) else None
    async with context_of(request).pool.acquire() as conn:
        if isinstance(body, TrackFromSession):
            track = await saved_tracks.session_lines(conn, caller.tenant, body.from_session,
                                                     body.name)
        else:
            track = TrackConfig(name=body.name, start_finish=body.start_finish,
                                finish=body.finish, sectors=body.sectors)
        saved = await saved_tracks.add_track(conn, tenant=caller.tenant, track=track,
                                             from_session=from_session,
                                             created_by=f"api:{caller.key_id}")
    return reply(saved, status=201)


async def remove_track(request: web.Request) -> web.Response:
    """Delete a saved track (library tracks are not the caller's to delete: 404)."""
    caller, name = caller_of(request), path_text(request, "track")
    async with context_of(request).pool.acquire() as conn:
        removed = await saved_tracks.remove_track(conn, caller.tenant, name)
    return reply(removed)


_TAG = "tracks"
_PATH = {"track": TRACK}

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/tracks", handler=list_tracks, tag=_TAG,
          summary="The caller's saved tracks (and the library's with include=all)",
          query=TrackQuery, response=TrackPage),
    Route(method="POST", path="/v1/tracks", handler=add_track, tag=_TAG,
          summary="Save a track (replacing one of the same name); later sessions use it",
          body=NewTrack, status=201, response=KnownTrack, errors=(409,)),
    Route(method="GET", path="/v1/tracks/{track}", handler=get_track, tag=_TAG,
          summary="One track: a saved track of the caller's, else a library track",
          response=KnownTrack, path_types=_PATH, not_found=_NO_TRACK),
    Route(method="DELETE", path="/v1/tracks/{track}", handler=remove_track, tag=_TAG,
          summary="Delete a saved track and answer it (runs already created keep their copy)",
          response=KnownTrack, path_types=_PATH, not_found=_NO_TRACK),
)  # fmt: skip
