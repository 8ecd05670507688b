"""Telemetry dead letters (grouped, redriven, resolved) and session dead letters."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from schemas.api.base import CURSOR_PATTERN, Page, Text, _Body, _Query, _Request

DeadLetterState = Literal["open", "resolved"]


class DeadLetterGroupQuery(_Query):
    state: DeadLetterState = "open"


class DeadLetterSample(_Body):
    id: int
    subject: str
    payload_text: str = Field(description="The start of the original body (at most 512 chars).")
    resolution: str | None = Field(description="`redriven` or `operator` once resolved.")
    resolution_note: str | None = Field(description="Why an operator resolved it.")
    resolved_by: str | None = Field(description="Who resolved it (an API key, the CLI's user).")
    resolved_at: datetime | None


class DeadLetterGroup(_Body):
    """Dead letters with one error signature: reason code, failing stage, schema version."""

    id: str = Field(description="The group's opaque id.")
    code: str
    stage: str | None
    schema_name: str | None = Field(alias="schema")
    schema_version: int | None
    count: int
    first_seen_at: datetime
    last_seen_at: datetime
    sample: DeadLetterSample

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)


class DeadLetterGroupPage(Page[DeadLetterGroup]):
    """Error signatures, in signature order."""


class DeadLetterQuery(_Query):
    state: DeadLetterState = "open"
    group: str | None = Field(
        None, pattern=CURSOR_PATTERN, description="Only this group's (a group's `id`)."
    )


class DeadLetterSummary(_Body):
    id: int
    ingestion_message_id: int
    tenant: str | None = Field(exclude=True)  # operator-only (the CLI lists every tenant's)
    subject: str
    reason_code: str
    state: str
    redrive_count: int
    first_seen_at: datetime
    last_seen_at: datetime
    resolution: str | None = Field(description="`redriven` or `operator` once resolved.")
    resolution_note: str | None = Field(description="Why an operator resolved it.")
    resolved_by: str | None = Field(description="Who resolved it (an API key, the CLI's user).")
    resolved_at: datetime | None
    status: str = Field(description="The envelope's status.")


class DeadLetterPage(Page[DeadLetterSummary]):
    """Dead letters, oldest first."""


class DeadLetter(DeadLetterSummary):
    headers: dict[str, Any]
    failures: list[dict[str, Any]]
    attempts: int
    stream_seq: int | None
    received_at: datetime | None
    source_deduplication_key: str | None
    envelope: Any = Field(description="The original body as JSON, or null if it is not JSON.")
    payload_text: str
    payload_bytes: int
    # operator-only: the signature's columns as stored, and the envelope's dedupe key as text
    failed_stage: str | None = Field(exclude=True)
    schema_version_id: uuid.UUID | None = Field(exclude=True)
    dedupe_key: str | None = Field(exclude=True)


class RedriveResult(_Body):
    dead_letter_id: int
    message_id: int | None
    outcome: Literal["completed", "failed", "not_redrivable", "not_open"]
    detail: str | None


class RedriveReport(_Body):
    completed: int
    failed: int
    not_redrivable: int
    not_open: int
    # operator-only: the pages a redrive took, and the open dead letters a redrive of all
    # cannot publish (malformed envelopes), by reason code, left for ``tideway dlq resolve``
    pages: int = Field(exclude=True)
    unreachable: dict[str, int] = Field(exclude=True)
    results: tuple[RedriveResult, ...]

    def count(self, outcome: str) -> int:
        """How many dead letters ended in ``outcome``."""
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def nothing_done(self) -> bool:
        """Some redrive failed, or there were dead letters and none could be redriven (the
        CLI's exit code 3). False when everything reached completed, or nothing was open."""
        if self.failed:
            return True
        return self.completed == 0 and bool(self.results or self.unreachable)


class ResolveRequest(_Request):
    note: Text = Field(min_length=1, max_length=2000, description="Why they are resolved.")


class ResolveReport(_Body):
    resolved: list[int]
    not_resolved: list[int]


class SessionDeadLetterQuery(_Query):
    """A page of the caller's session dead letters (no filter of its own)."""


class SessionDeadLetter(_Body):
    """A session notice intake dead-lettered (JetStream's ``SESSIONS_DLQ``; never its body)."""

    id: int = Field(description="The dead letter's id: its sequence in the dead-letter stream.")
    tenant: str = Field(exclude=True)  # operator-only (the CLI lists every tenant's)
    subject: str = Field(description="The notice's original subject.")
    device: str
    code: str = Field(description="Why intake refused it (`BAD_NOTICE`, `ARTIFACT_MISSING`...).")
    message: str
    # operator-only: the notice's body as intake received it (text; it may not even be JSON),
    # which a redrive publishes again, and when the stream stored the dead letter
    notice: str = Field(exclude=True)
    dead_lettered_at: datetime | None = Field(exclude=True)
    error_type: str | None = Field(
        description="`permanent` (it can never succeed as it is) or `transient` (it kept "
        "failing until the delivery budget ran out); null for an old dead letter."
    )
    retry_count: int | None = Field(description="Deliveries before the one that dead-lettered it.")
    deliveries: int | None = Field(exclude=True)  # operator-only
    first_seen_at: datetime | None = Field(description="When the notice was stored.")
    last_seen_at: datetime | None = Field(description="When it was dead-lettered.")
    # operator-only: where a bug or a refused statement was raised (class and frames, never
    # the text)
    stack_trace: str | None = Field(exclude=True)


class SessionDeadLetterPage(Page[SessionDeadLetter]):
    """Session dead letters, oldest first."""
