"""``tideway tracks list|show|add|remove``: the tenant's saved tracks and the track library.

A saved track is timing lines under a name (``streams.sessions.saved_tracks``); every run the
tenant creates afterwards carries them, and ``detect_laps`` times a session on the one it was
driven on (or the one its config's ``track`` names). ``tracks list --library`` shows the
library's circuits too (``stages.batch.track_library``).
"""

from __future__ import annotations

import getpass
import re
from typing import Any

import typer
from pydantic import ValidationError

from schemas.api import TRACK_NAME_PATTERN, KnownTrack, operator_fields
from schemas.run_config import StartFinish, TrackConfig, explain
from stages.batch.track_library import attribution
from streams.cli.options import (
    JSON_OPTION,
    TENANT_OPTION,
    parse_id,
    run_with_connection,
    tenant_name,
)
from streams.cli.output import console, print_record, print_rows
from streams.errors import UsageError
from streams.sessions.saved_tracks import (
    add_track,
    get_track,
    library_tracks,
    list_tracks,
    remove_track,
    session_lines,
)

tracks_app = typer.Typer(
    help="Tracks: the tenant's saved timing lines (add, list, show, remove) and the library.",
    no_args_is_help=True)

_COLUMNS = ("name", "source", "start_finish", "finish", "sectors", "created_at")


def _line_text(line: StartFinish | None) -> str | None:
    return None if line is None else f"{line.lat1},{line.lon1},{line.lat2},{line.lon2}"


def _row(t: KnownTrack) -> dict[str, Any]:
    return {**operator_fields(t), "start_finish": _line_text(t.start_finish),
            "finish": _line_text(t.finish), "sectors": len(t.sectors)}


def parse_line(value: str, option: str) -> StartFinish:
    """``lat1,lon1,lat2,lon2`` (WGS84 degrees) as a line (``UsageError`` naming ``option``)."""
    parts = value.split(",")
    try:
        if len(parts) != 4:
            raise ValueError
        lat1, lon1, lat2, lon2 = (float(p) for p in parts)
        return StartFinish(lat1=lat1, lon1=lon1, lat2=lat2, lon2=lon2)
    except ValueError as exc:
        why = explain(exc, root=option) if isinstance(exc, ValidationError) else ""
        raise UsageError(f"{option} takes lat1,lon1,lat2,lon2 in degrees: {value!r}"
                         + (f" ({why})" if why else "")) from None


def check_name(name: str) -> str:
    if re.fullmatch(TRACK_NAME_PATTERN, name) is None:
        raise UsageError(f"not a track name: {name!r} (letters, digits, spaces and ._()'-, "
                         "at most 100, starting with a letter or digit)")
    return name


@tracks_app.command("list")
def tracks_list(
    library: bool = typer.Option(False, "--library", help="The library's circuits too."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The tenant's saved tracks (and with --library the library's), by name."""
    owner = tenant_name(tenant)
    found = run_with_connection(lambda conn: list_tracks(conn, owner))
    if library:
        found = [*found, *library_tracks()]
    print_rows([_row(t) for t in found], columns=_COLUMNS, title=f"Tracks of {owner}",
               as_json=as_json)
    if library and not as_json:
        console.print(f"library: {attribution()}", soft_wrap=True)


@tracks_app.command("show")
def tracks_show(
    name: str = typer.Argument(..., help="A saved track's name, or a library track's."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One track: its lines (each lat1,lon1,lat2,lon2) and where it comes from."""
    owner = tenant_name(tenant)
    track = run_with_connection(lambda conn: get_track(conn, owner, name))
    record = {**_row(track), "sectors": [_line_text(x) for x in track.sectors]}
    if as_json:
        record = operator_fields(track)
    print_record(record, title=f"Track {track.name}", as_json=as_json)


@tracks_app.command("add")
def tracks_add(
    name: str = typer.Argument(..., help="The track's name (unique in the tenant)."),
    start_finish: str | None = typer.Option(
        None, "--start-finish", help="lat1,lon1,lat2,lon2: the start/finish (a stage's start)."),
    finish: str | None = typer.Option(
        None, "--finish", help="lat1,lon1,lat2,lon2: a point-to-point stage's finish line."),
    sector: list[str] = typer.Option(
        [], "--sector", help="lat1,lon1,lat2,lon2: a sector line (repeat, in driving order)."),
    from_session: str | None = typer.Option(
        None, "--from-session", help="Take the lines this session's active run was timed with."),
    tenant: str | None = TENANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Save a track (replaces one of the same name); later sessions are timed on it."""
    owner = tenant_name(tenant)
    check_name(name)
    session = parse_id(from_session, "session") if from_session else None
    if (session is None) == (start_finish is None):
        raise UsageError("give --start-finish or --from-session (one of them)")
    if session is not None and (finish or sector):
        raise UsageError("--finish and --sector come with --start-finish, not --from-session")

    async def main(conn: Any) -> KnownTrack:
        if session is not None:
            track = await session_lines(conn, owner, session, name)
        else:
            assert start_finish is not None
            track = TrackConfig(
                name=name, start_finish=parse_line(start_finish, "--start-finish"),
                finish=parse_line(finish, "--finish") if finish else None,
                sectors=[parse_line(x, "--sector") for x in sector])
        return await add_track(conn, tenant=owner, track=track, from_session=session,
                               created_by=f"cli {getpass.getuser()}")

    saved = run_with_connection(main)
    if as_json:
        print_record(operator_fields(saved), as_json=True)
        return
    kind = "stage" if saved.finish is not None else "circuit"
    console.print(f"saved track {saved.name} of {owner} ({kind}, {len(saved.sectors)} sector "
                  "lines); sessions uploaded from now on are timed on it when they cross it")


@tracks_app.command("remove")
def tracks_remove(name: str = typer.Argument(..., help="The saved track's name."),
                  tenant: str | None = TENANT_OPTION) -> None:
    """Remove a saved track (runs already created keep their copy of it)."""
    owner = tenant_name(tenant)
    run_with_connection(lambda conn: remove_track(conn, owner, name))
    console.print(f"removed saved track {name} of {owner}")
