"""Session notices intake dead-lettered (``SESSIONS_DLQ``): the stream they are read from, and
redrive. Listing and showing them is the read side's (:mod:`streams.views.session_dead_letters`).

Intake dead-letters only a notice that can never succeed as it is (a malformed body, an
artifact missing from the object store, an invalid run config, a poison notice past
``consumer.max_deliver``; see :mod:`streams.sessions.intake`): it publishes
``{"subject", "code", "message", "notice"}`` with spec 003's fields (``error_type``,
``retry_count`` and ``deliveries``, ``first_seen_at``, ``last_seen_at``, ``stack_trace`` where
there is one) on ``dlq.sessions.<tenant>.<device>`` and only then terminates the notice. The
stream sequence of that message is the dead letter's id. Each reads as the API's
:class:`~schemas.api.SessionDeadLetter` (the notice, its tenant, its stream time, deliveries and
stack trace are operator-only fields). A dead letter stored before those fields existed reads
with them empty (``None``), as does a timestamp that is not ISO 8601 with its offset.

Unlike ingest's dead letters (rows in Postgres, :mod:`streams.ingest.dlq`), these live in
JetStream only, so listing reads the stream (``next_by_subj`` from an id on, filtered by
tenant) and nothing here needs Postgres. **Redrive** publishes the stored notice again on its
original subject - once its cause is fixed (the artifact put back, a newer intake that accepts
it) - and then deletes the dead letter. The republished notice carries ``Nats-Msg-Id``
``redrive:<stream>:<id>``, so redriving the same dead letter twice inside the duplicate window
is one notice; beyond it intake is idempotent anyway (one run per artifact set). A notice that
still cannot succeed is simply dead-lettered again, under a new id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from schemas.api import SessionDeadLetter
from streams.adapters.errors import JsNotFound, NatsError, nats_unavailable
from streams.adapters.nats import ONE_SHOT_ATTEMPTS, JetStreamContext, Nats, connect_nats
from streams.config import Settings
from streams.errors import TransientError
from streams.names import Names

__all__ = [
    "NOT_FOUND",
    "REDRIVEN",
    "DeadLetterStream",
    "RedriveResult",
    "redrive_dead_notices",
]

REDRIVEN = "redriven"
NOT_FOUND = "not_found"


@dataclass(frozen=True, kw_only=True, slots=True)
class RedriveResult:
    """What a redrive did with one id: ``redriven``, or ``not_found`` (no such dead letter)."""

    id: int
    outcome: str
    subject: str | None = None


def _dead_letter(raw: Any) -> SessionDeadLetter:
    parts = raw.subject.split(".")
    try:
        body = orjson.loads(raw.data or b"{}")
    except orjson.JSONDecodeError:
        body = {}
    return SessionDeadLetter(
        id=int(raw.seq),
        tenant=parts[-2] if len(parts) >= 2 else "",
        device=parts[-1] if parts else "",
        subject=str(body.get("subject", "")),
        code=str(body.get("code", "")),
        message=str(body.get("message", "")),
        notice=str(body.get("notice", "")),
        dead_lettered_at=getattr(raw, "time", None) or None,
        error_type=_text(body.get("error_type")),
        retry_count=_count(body.get("retry_count")),
        deliveries=_count(body.get("deliveries")),
        first_seen_at=_instant(body.get("first_seen_at")),
        last_seen_at=_instant(body.get("last_seen_at")),
        stack_trace=_text(body.get("stack_trace")),
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _instant(value: Any) -> datetime | None:
    """A stored timestamp, or ``None`` for one missing or not ISO 8601 with its offset."""
    try:
        found = datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None
    return found if found is not None and found.tzinfo is not None else None


class DeadLetterStream:
    """SESSIONS_DLQ, open for one command: its dead letters read as the API's
    :class:`~schemas.api.SessionDeadLetter` (the read side,
    :mod:`streams.views.session_dead_letters`, lists and shows them through it)."""

    def __init__(self, settings: Settings, nc: Nats | None = None) -> None:
        self.names = Names(namespace=settings.namespace)
        self.settings = settings
        self.stream = self.names.sessions_dead_letter_stream
        self._shared = nc

    async def __aenter__(self) -> DeadLetterStream:
        self.nc = self._shared or await connect_nats(
            self.settings.nats, name="tideway-sessions-dlq", attempts=ONE_SHOT_ATTEMPTS
        )
        self.js: JetStreamContext = self.nc.jetstream()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._shared is None:  # a connection of the caller's (the API's) stays open
            await self.nc.close()

    async def list(
        self, *, tenant: str | None = None, after: int = 0, limit: int = 100
    ) -> list[SessionDeadLetter]:
        """Dead letters, oldest first, with ids above ``after`` (only ``tenant``'s)."""
        subjects = (
            self.names.sessions_dead_letter_subject(tenant, "*")
            if tenant
            else self.names.sessions_dead_letter_subjects
        )
        found: list[SessionDeadLetter] = []
        while len(found) < limit:
            try:
                raw = await self.js.get_msg(
                    self.stream, seq=after + 1, subject=subjects, next=True
                )
            except JsNotFound:
                break
            except (NatsError, TimeoutError) as exc:
                raise _unavailable(exc) from exc
            found.append(_dead_letter(raw))
            after = found[-1].id
        return found

    async def get(self, dead_letter_id: int) -> SessionDeadLetter | None:
        try:
            raw = await self.js.get_msg(self.stream, seq=dead_letter_id)
        except JsNotFound:
            return None
        except (NatsError, TimeoutError) as exc:
            raise _unavailable(exc) from exc
        return _dead_letter(raw)


def _unavailable(exc: BaseException) -> TransientError:
    return nats_unavailable("read SESSIONS_DLQ", exc)


async def redrive_dead_notices(
    settings: Settings, ids: Sequence[int] | None = None, *, tenant: str | None = None
) -> list[RedriveResult]:
    """Publish dead-lettered notices again on their subjects, then delete the dead letters:
    those in ``ids``, or every one (of ``tenant``) when ``ids`` is ``None``."""
    results: list[RedriveResult] = []
    async with DeadLetterStream(settings) as dlq:
        if ids is None:
            ids = [d.id for d in await dlq.list(tenant=tenant, limit=1_000_000)]
        for dead_letter_id in ids:
            dead = await dlq.get(dead_letter_id)
            if dead is None or not dead.subject:
                results.append(RedriveResult(id=dead_letter_id, outcome=NOT_FOUND))
                continue
            headers = {"Nats-Msg-Id": f"redrive:{dlq.stream}:{dead.id}"}
            try:
                await dlq.js.publish(
                    dead.subject, dead.notice.encode("utf-8"), headers=headers, timeout=10
                )
                await dlq.js.delete_msg(dlq.stream, dead.id)
            except (NatsError, TimeoutError) as exc:
                raise TransientError(
                    f"cannot redrive session dead letter {dead.id}: {exc}", code="NATS_PUBLISH"
                ) from exc
            results.append(RedriveResult(id=dead.id, outcome=REDRIVEN, subject=dead.subject))
    return results
