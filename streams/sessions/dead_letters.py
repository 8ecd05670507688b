"""Session notices intake dead-lettered: list, show and redrive them (``SESSIONS_DLQ``).

Intake dead-letters only a notice that can never succeed as it is (a malformed body, an
artifact missing from the object store, an invalid run config, a poison notice past
``consumer.max_deliver``; see :mod:`streams.sessions.intake`): it publishes
``{"subject", "code", "message", "notice"}`` with spec 003's fields (``error_type``,
``retry_count`` and ``deliveries``, ``first_seen_at``, ``last_seen_at``, ``stack_trace`` where
there is one) on ``dlq.sessions.<tenant>.<device>`` and only then terminates the notice. The
stream sequence of that message is the dead letter's id. A dead letter stored before those
fields existed reads with them empty (``None``).

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
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from streams.adapters.errors import JsNotFound, NatsError, nats_unavailable
from streams.adapters.nats import ONE_SHOT_ATTEMPTS, JetStreamContext, Nats, connect_nats
from streams.config import Settings
from streams.errors import NotFoundError, TransientError
from streams.names import Names

__all__ = [
    "NOT_FOUND",
    "REDRIVEN",
    "DeadNotice",
    "RedriveResult",
    "list_dead_notices",
    "redrive_dead_notices",
    "show_dead_notice",
]

REDRIVEN = "redriven"
NOT_FOUND = "not_found"


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadNotice:
    """One dead-lettered notice: its id (stream sequence), where it came from and why."""

    id: int
    tenant: str
    device: str
    subject: str
    """The notice's original subject (where a redrive publishes it)."""
    code: str
    message: str
    notice: str
    """The notice's body as intake received it (text; it may not even be JSON)."""
    dead_lettered_at: str | None
    error_type: str | None = None
    """``permanent``: the notice can never succeed as it is; ``transient``: it failed in a way a
    retry could fix (a bug, a statement Postgres refused) until ``consumer.max_deliver``."""
    retry_count: int | None = None
    """Deliveries before the one that dead-lettered it (``deliveries - 1``)."""
    deliveries: int | None = None
    first_seen_at: str | None = None
    """When the notice was stored in SESSIONS (a redriven notice starts again)."""
    last_seen_at: str | None = None
    """When intake handled it the last time, the time it was dead-lettered."""
    stack_trace: str | None = None
    """Where a bug or a refused statement was raised: class and frames, never the text."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class RedriveResult:
    """What a redrive did with one id: ``redriven``, or ``not_found`` (no such dead letter)."""

    id: int
    outcome: str
    subject: str | None = None


def _dead_notice(names: Names, raw: Any) -> DeadNotice:
    parts = raw.subject.split(".")
    try:
        body = orjson.loads(raw.data or b"{}")
    except orjson.JSONDecodeError:
        body = {}
    return DeadNotice(
        id=int(raw.seq),
        tenant=parts[-2] if len(parts) >= 2 else "",
        device=parts[-1] if parts else "",
        subject=str(body.get("subject", "")),
        code=str(body.get("code", "")),
        message=str(body.get("message", "")),
        notice=str(body.get("notice", "")),
        dead_lettered_at=str(raw.time) if getattr(raw, "time", None) else None,
        error_type=_text(body.get("error_type")),
        retry_count=_count(body.get("retry_count")),
        deliveries=_count(body.get("deliveries")),
        first_seen_at=_text(body.get("first_seen_at")),
        last_seen_at=_text(body.get("last_seen_at")),
        stack_trace=_text(body.get("stack_trace")),
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Dlq:
    """An open connection to SESSIONS_DLQ for one command."""

    def __init__(self, settings: Settings, nc: Nats | None = None) -> None:
        self.names = Names(namespace=settings.namespace)
        self.settings = settings
        self.stream = self.names.sessions_dead_letter_stream
        self._shared = nc

    async def __aenter__(self) -> _Dlq:
        self.nc = self._shared or await connect_nats(
            self.settings.nats, name="tideway-sessions-dlq", attempts=ONE_SHOT_ATTEMPTS
        )
        self.js: JetStreamContext = self.nc.jetstream()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._shared is None:  # a connection of the caller's (the API's) stays open
            await self.nc.close()

    async def next_after(self, after: int, subjects: str) -> DeadNotice | None:
        try:
            raw = await self.js.get_msg(self.stream, seq=after + 1, subject=subjects, next=True)
        except JsNotFound:
            return None
        except (NatsError, TimeoutError) as exc:
            raise _unavailable(exc) from exc
        return _dead_notice(self.names, raw)

    async def get(self, dead_letter_id: int) -> DeadNotice | None:
        try:
            raw = await self.js.get_msg(self.stream, seq=dead_letter_id)
        except JsNotFound:
            return None
        except (NatsError, TimeoutError) as exc:
            raise _unavailable(exc) from exc
        return _dead_notice(self.names, raw)


def _unavailable(exc: BaseException) -> TransientError:
    return nats_unavailable("read SESSIONS_DLQ", exc)


async def list_dead_notices(
    settings: Settings,
    *,
    tenant: str | None = None,
    after: int = 0,
    limit: int = 100,
    nc: Nats | None = None,
) -> list[DeadNotice]:
    """Dead-lettered notices, oldest first, with ids above ``after`` (only ``tenant``'s).

    On ``nc`` when given (the API's connection, left open), else on a connection of its own."""
    async with _Dlq(settings, nc) as dlq:
        subjects = (
            dlq.names.sessions_dead_letter_subject(tenant, "*")
            if tenant
            else dlq.names.sessions_dead_letter_subjects
        )
        found: list[DeadNotice] = []
        while len(found) < limit:
            dead = await dlq.next_after(after, subjects)
            if dead is None:
                break
            found.append(dead)
            after = dead.id
        return found


async def show_dead_notice(settings: Settings, dead_letter_id: int) -> DeadNotice:
    """One dead letter (``NotFoundError`` if there is none with that id)."""
    async with _Dlq(settings) as dlq:
        dead = await dlq.get(dead_letter_id)
    if dead is None:
        raise NotFoundError(f"no session dead letter {dead_letter_id}")
    return dead


async def redrive_dead_notices(
    settings: Settings, ids: Sequence[int] | None = None, *, tenant: str | None = None
) -> list[RedriveResult]:
    """Publish dead-lettered notices again on their subjects, then delete the dead letters:
    those in ``ids``, or every one (of ``tenant``) when ``ids`` is ``None``."""
    if ids is None:
        ids = [d.id for d in await list_dead_notices(settings, tenant=tenant, limit=1_000_000)]
    results: list[RedriveResult] = []
    async with _Dlq(settings) as dlq:
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
