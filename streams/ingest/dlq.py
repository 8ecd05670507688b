"""Dead letters: redrive and resolve (their reads are :mod:`streams.views.dead_letters`).

A dead letter is written, in the recording transaction, for every envelope that ended in
``failed_terminal`` for a reason an operator should look at: an exhausted publish
(``PUBLISH_FAILED``), a malformed envelope (``ENVELOPE_*``), a stage bug
(``INTERNAL_ERROR``) or a row Postgres refused (``PERSIST_REJECTED``). It holds the original
envelope (subject, headers, body) and the list of failures, oldest first: for an exhausted
publish, one entry per sink per failed delivery.

``redrive`` re-runs *publish* for dead letters whose telemetry row is ``publish_failed``,
from the values that row holds (what was computed when the envelope arrived, not a
re-evaluation against today's registry). Success moves the envelope ``failed_terminal ->
completed`` and its telemetry ``publish_failed -> processed`` (the state machines' redrive
edges) and resolves the dead letter; failure appends to its failures. Each redrive is one
more processing pass with its own ``publish`` stage log. It goes through every open dead
letter it can publish in pages (each page one transaction), so nothing is out of its reach;
dead letters without telemetry (malformed envelopes) can never be published: named ones are
reported ``not_redrivable``, and a redrive of all counts them by reason code.

``resolve`` is how an operator closes dead letters that will never be redriven (by id or by
reason code), with a note; the dead letter records ``resolution = 'operator'``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from schemas.api import RedriveReport, RedriveResult
from schemas.envelope import epoch_us
from stages.ingest.evaluate import DeviceRecord, Evaluation, StageLog
from stages.ingest.ingress import DecodedEnvelope, Receipt, SubjectParts, key_hash
from stages.ingest.plan import PUBLISH_FAILED, pass_lines, publish_failures
from stages.ingest.processing_state import ProcessingState
from stages.ingest.status import Status
from streams.adapters.errors import PG_FAILURES, translate_pg
from streams.adapters.postgres import Conn
from streams.config import Settings
from streams.errors import TidewayError, UsageError
from streams.ingest import sql
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import HotState
from streams.ingest.publish import Publisher
from streams.ingest.recorder import copy_lines
from streams.ingest.registry_cache import RegistryCache
from streams.ingest.resources import Resources

# A redrive's outcome for one dead letter (schemas.api.RedriveResult.outcome).
COMPLETED: Final = "completed"
FAILED: Final = "failed"
NOT_REDRIVABLE: Final = "not_redrivable"
NOT_OPEN: Final = "not_open"
_NOT_REDRIVABLE = ("no publishable telemetry (the envelope never passed its stages); "
                   "resolve it with `tideway dlq resolve`")


@dataclass(frozen=True, kw_only=True, slots=True)
class RedrivePage:
    """One page of a redrive, as it finished (for progress)."""

    number: int
    results: tuple[RedriveResult, ...]
    total: int
    """Dead letters answered so far, this page included."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolveReport:
    """What ``resolve`` closed, and the named ids it could not (not open, or unknown)."""

    resolved: tuple[dict[str, Any], ...]
    not_resolved: tuple[int, ...]


def _evaluation(row: Any, binding: Any) -> Evaluation:
    """Rebuild what publish needs from a dead letter's telemetry row."""
    received_ns = epoch_us(row["received_at"]) * 1000
    measured: datetime = row["measured_at"]
    ts_us = epoch_us(measured)
    parts = SubjectParts(tenant=row["tenant"], device=row["device"], topic=row["topic"])
    receipt = Receipt.of(subject="", data=b"", headers=None, stream_seq=0,
                         received_at_ns=received_ns)
    device = DeviceRecord(id=row["device_id"], tenant_id=row["tenant_id"], tenant=row["tenant"],
                          external_id=row["device"], active=True,
                          schema_version_id=row["schema_version_id"])
    return Evaluation(
        receipt=receipt, key=row["key"], key_digest=key_hash(row["key"]), parts=parts,
        status=Status.COMPLETED, error_code=None,
        error_message=None, device=device, binding=binding,
        envelope=DecodedEnvelope(ts=measured, ts_us=ts_us, seq=row["seq"], values={}),
        state=ProcessingState.PROCESSED, values=row["parameter_values"],
        values_json=orjson.dumps(row["parameter_values"]).decode(), issues=(), logs=(),
        dead_letter=False,
    )


async def resolve_dead_letters(conn: Conn, *, note: str, ids: list[int] | None = None,
                               code: str | None = None,
                               tenant: str | None = None,
                               by: str | None = None) -> ResolveReport:
    """Close open dead letters an operator has dealt with (by ``ids`` and/or reason ``code``,
    optionally one ``tenant``), recording ``note`` and who resolved them (``by``). Malformed
    envelopes can never be redriven; this is how they leave the open list. Their envelopes
    keep their recorded status."""
    if not ids and code is None:
        raise UsageError("name the dead letters to resolve: ids, or --code CODE")
    if not note.strip():
        raise UsageError("--note must say why the dead letters are resolved")
    try:
        rows = await conn.fetch(sql.DEAD_LETTER_RESOLVE, ids or None, code, tenant, note, by)
    except PG_FAILURES as exc:
        raise translate_pg(exc) from exc
    resolved = tuple(sorted((dict(row) for row in rows), key=lambda r: int(r["id"])))
    done = {r["id"] for r in resolved}
    return ResolveReport(resolved=resolved,
                         not_resolved=tuple(i for i in sorted(set(ids or ())) if i not in done))


async def redrive(settings: Settings, *, ids: list[int] | None = None, page_size: int = 500,
                  on_page: Callable[[RedrivePage], None] | None = None,
                  pool: Any = None) -> RedriveReport:
    """Re-run publish for open dead letters: every one that can be redriven, or those in
    ``ids``; ``page_size`` at a time, each page its own transaction, ``on_page`` told after
    each. Raises ``CLICKHOUSE_BUSY`` before changing anything when the embedded ClickHouse
    belongs to another process. ``pool``: a Postgres pool the caller keeps (the API's);
    without it a pool of two connections is opened and closed."""
    if page_size < 1:
        raise UsageError("the page size must be at least 1")
    resources = (Resources.around(settings, pool) if pool is not None else
                 await Resources.open(settings, name="tideway-dlq", pool_size=2, nats=False))
    try:
        return await _redrive(resources, ids, page_size, on_page)
    finally:
        await resources.close()


async def _redrive(resources: Resources, ids: list[int] | None, page_size: int,
                   on_page: Callable[[RedrivePage], None] | None) -> RedriveReport:
    settings = resources.settings
    retry = settings.retry
    publisher = Publisher(
        hot_state=HotState(resources.redis),
        analytics=Analytics(resources.clickhouse, resources.names.analytics_table),
        names=resources.names, attempts=retry.publish_attempts,
        backoff=retry.publish_backoff(),
        rand=random.Random(),
    )
    cache = RegistryCache(ttl_s=0)
    results: list[RedriveResult] = []
    after, pages, checked = 0, 0, False
    try:
        while True:
            async with resources.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(sql.REDRIVE_CANDIDATES, ids, after, page_size)
                if not rows:
                    break
                after = max(row["dead_letter_id"] for row in rows)
                page: list[RedriveResult] = []
                publishable: list[tuple[Any, Evaluation]] = []
                for row in rows:
                    binding = None
                    if row["processing_state"] == ProcessingState.PUBLISH_FAILED.value:
                        binding = await cache.binding(conn, row["schema_version_id"],
                                                      row["topic"])
                    if binding is None:
                        page.append(RedriveResult(
                            dead_letter_id=row["dead_letter_id"], message_id=row["message_id"],
                            outcome=NOT_REDRIVABLE, detail=_NOT_REDRIVABLE))
                        continue
                    publishable.append((row, _evaluation(row, binding)))
                if publishable and not checked:
                    await _check_clickhouse(resources)
                    checked = True
                outcomes = await publisher.publish([ev for _, ev in publishable])
                await _record(conn, publishable, outcomes, page)
            pages += 1
            results += page
            if on_page is not None:
                on_page(RedrivePage(number=pages, results=tuple(page), total=len(results)))
        unreachable: dict[str, int] = {}
        if ids is None:
            async with resources.pool.acquire() as conn:
                unreachable = {r["reason_code"]: r["count"]
                               for r in await conn.fetch(sql.REDRIVE_UNREACHABLE)}
    except PG_FAILURES as exc:
        raise translate_pg(exc) from exc
    seen = {r.dead_letter_id for r in results}
    results += [RedriveResult(dead_letter_id=i, message_id=None, outcome=NOT_OPEN,
                              detail="not an open dead letter (or another redrive holds it)")
                for i in sorted(set(ids or ())) if i not in seen]
    counts = Counter(r.outcome for r in results)
    return RedriveReport(
        completed=counts[COMPLETED], failed=counts[FAILED],
        not_redrivable=counts[NOT_REDRIVABLE], not_open=counts[NOT_OPEN], pages=pages,
        unreachable=unreachable, results=tuple(sorted(results, key=lambda r: r.dead_letter_id)))


async def _check_clickhouse(resources: Resources) -> None:
    """Refuse before anything is written when the embedded ClickHouse is another process's:
    every envelope would fail on it, after its hot state was written and its attempt counted.
    A server that is merely down is not refused: like Redis down, that is a failed redrive
    the dead letter records."""
    try:
        await resources.clickhouse.check()
    except TidewayError as exc:
        if exc.code == "CLICKHOUSE_BUSY":
            raise


async def _record(conn: Conn, publishable: list[tuple[Any, Evaluation]], outcomes: list[Any],
                  results: list[RedriveResult]) -> None:
    at = datetime.now(UTC)
    done: list[tuple[int, int, int]] = []
    failed: list[tuple[int, int, int, str]] = []
    passes: list[tuple[int, int, list[StageLog]]] = []
    for (row, _), outcome in zip(publishable, outcomes, strict=True):
        attempt = row["attempts"] + 1
        dl, msg = row["dead_letter_id"], row["message_id"]
        if outcome.ok:
            done.append((dl, msg, attempt))
            passes.append((msg, attempt, [StageLog("publish", "ok", outcome.duration_us)]))
            results.append(RedriveResult(dead_letter_id=dl, message_id=msg, outcome=COMPLETED,
                                         detail=None))
            continue
        message = "; ".join(f"{f.sink}: {f.message}" for f in outcome.failures)
        failures = [{**f, "redrive": True}
                    for f in publish_failures(outcome, at=at, attempt=attempt)]
        failed.append((dl, msg, attempt, orjson.dumps(failures).decode()))
        passes.append((msg, attempt, [StageLog("publish", "failed", outcome.duration_us,
                                               PUBLISH_FAILED, message)]))
        results.append(RedriveResult(dead_letter_id=dl, message_id=msg, outcome=FAILED,
                                     detail=message))
    if done:
        await conn.fetch(sql.REDRIVE_RESOLVE, *(list(c) for c in zip(*done, strict=True)))
    if failed:
        await conn.fetch(sql.REDRIVE_FAILED, *(list(c) for c in zip(*failed, strict=True)))
    if passes:
        await copy_lines(conn, sql.STAGE_PASSES, sql.STAGE_PASS_COPY,
                         pass_lines(passes, capture=False))
