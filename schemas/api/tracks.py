"""Tracks: the tenant's saved tracks and the library's (``tideway tracks``, ``/v1/tracks``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from schemas.api.base import Page, _Body, _Request
from schemas.run_config import StartFinish

__all__ = [
    "TRACK_NAME_PATTERN",
    "KnownTrack",
    "NewTrack",
    "TrackFromSession",
    "TrackLines",
    "TrackPage",
    "TrackQuery",
]

TRACK_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9 ._()'-]{0,99}$"
"""A saved track's name: letters, digits, spaces and ``._()'-``, at most 100 (a run config's
``track`` names it; the API's path carries it)."""


class KnownTrack(_Body):
    """A track sessions are timed on: one of the tenant's saved tracks or a library track."""

    name: str
    source: Literal["saved", "library"] = Field(
        description="`saved`: the tenant's own; `library`: shipped with Tideway.")
    start_finish: StartFinish = Field(
        description="A circuit's start/finish line; a stage's start line.")
    finish: StartFinish | None = Field(
        description="A point-to-point stage's finish line (null: a circuit).")
    sectors: list[StartFinish] = Field(description="Sector lines, in driving order.")
    key: str | None = Field(None, description="A library track's id (`gb-1948`).")
    reference: str | None = Field(
        None, description="Where a library track's geometry comes from, and its licence.")
    from_session: uuid.UUID | None = Field(
        None, description="The session whose timing lines a saved track was made from.")
    created_by: str | None = None
    created_at: datetime | None = None


class TrackPage(Page[KnownTrack]):
    """Tracks by name: the tenant's saved ones, then (``include=all``) the library's. One page:
    a tenant has a handful."""


class TrackQuery(BaseModel):
    """``GET /v1/tracks``'s query (unknown parameters are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    include: Literal["saved", "all"] = Field(
        "saved", description="`saved`: the tenant's tracks; `all`: the library's too.")


class TrackLines(_Request):
    """A track to save from its lines."""

    name: str = Field(pattern=TRACK_NAME_PATTERN, max_length=100)
    start_finish: StartFinish = Field(
        description="The start/finish line of a circuit; the start line of a stage.")
    finish: StartFinish | None = Field(None, description="A stage's finish line.")
    sectors: list[StartFinish] = Field(default_factory=list, max_length=32)


class TrackFromSession(_Request):
    """A track to save from the lines a session's active run was timed with."""

    name: str = Field(pattern=TRACK_NAME_PATTERN, max_length=100)
    from_session: uuid.UUID


class NewTrack(RootModel[TrackLines | TrackFromSession]):
    """A track to save: its lines, or ``from_session``. A track of the same name is
    replaced."""

    model_config = ConfigDict(frozen=True)
