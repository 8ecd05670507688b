"""Dead letters: list, show, and redrive.

A dead letter is written, in the recording transaction, for every envelope that ended in
``failed_terminal`` for a reason an operator should look at: an exhausted publish
(``PUBLISH_FAILED``), a malformed envelope (``ENVELOPE_*``), a stage bug
(``INTERNAL_ERROR``) or a row Postgres refused (``PERSIST_REJECTED``). It holds the original
envelope (subject, headers, body) and the list of failures, oldest first.

``redrive`` re-runs *publish* for dead letters whose telemetry row is ``publish_failed``,
from the values that row holds (what was computed when the envelope arrived, not a
re-evaluation against today's registry). Success moves the envelope ``failed_terminal ->
completed`` and its telemetry ``publish_failed -> processed`` (the state machines' redrive
edges) and resolves the dead letter; failure appends to its failures. Each redrive is one
more processing pass with its own ``publish`` stage log. Dead letters without telemetry
(malformed envelopes) cannot be published and are reported as ``not_redrivable``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from schemas.envelope import epoch_us
from stages.ingest.evaluate import DeviceRecord, Evaluation, StageLog
from stages.ingest.ingress import DecodedEnvelope, Receipt, SubjectParts
from stages.ingest.plan import PUBLISH_FAILED, pass_line
from stages.ingest.processing_state import ProcessingState
from stages.ingest.status import Status
from streams.config import Settings
from streams.errors import NotFoundError
from streams.ingest import sql
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import HotState
from streams.ingest.publish import Publisher
from streams.ingest.recorder import PG_FAILURES, copy_lines, translate
from streams.ingest.registry_cache import RegistryCache
from streams.ingest.resources import Conn, Resources


@dataclass(frozen=True, kw_only=True, slots=True)
class RedriveResult:
    """What a redrive did for one dead letter."""

    dead_letter_id: int
    message_id: int
    outcome: str  # "completed" | "failed" | "not_redrivable"
    detail: str | None = None


async def list_dead_letters(conn: Conn, *, state: str | None = "open", tenant: str | None = None,
                            limit: int = 100) -> list[dict[str, Any]]:
    """Dead letters, oldest first (``state=None`` for all)."""
    rows = await conn.fetch(sql.DEAD_LETTER_LIST, state, tenant, limit)
    return [dict(row) for row in rows]


async def show_dead_letter(conn: Conn, dead_letter_id: int) -> dict[str, Any]:
    """One dead letter with its original envelope (``NotFoundError`` if there is none)."""
    row = await conn.fetchrow(sql.DEAD_LETTER, dead_letter_id)
    if row is None:
        raise NotFoundError(f"dead letter {dead_letter_id} not found")
    out = dict(row)
    payload: bytes = out.pop("payload")
    try:
        out["envelope"] = orjson.loads(payload)
    except orjson.JSONDecodeError:
        out["envelope"] = None
    out["payload_text"] = payload.decode("utf-8", "backslashreplace")[:4096]
    out["payload_bytes"] = len(payload)
    return out


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
        receipt=receipt, key=row["key"], parts=parts, status=Status.COMPLETED, error_code=None,
        error_message=None, device=device, binding=binding,
        envelope=DecodedEnvelope(ts=measured, ts_us=ts_us, seq=row["seq"], values={}),
        state=ProcessingState.PROCESSED, values=row["parameter_values"],
        values_json=orjson.dumps(row["parameter_values"]).decode(), issues=(), logs=(),
        dead_letter=False,
    )


async def redrive(settings: Settings, *, ids: list[int] | None = None,
                  limit: int = 1000) -> list[RedriveResult]:
    """Re-run publish for open dead letters (all, or those in ``ids``)."""
    resources = await Resources.open(settings, name="tideway-dlq", pool_size=2, nats=False)
    try:
        return await _redrive(resources, ids, limit)
    finally:
        await resources.close()


async def _redrive(resources: Resources, ids: list[int] | None, limit: int) -> list[RedriveResult]:
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
    try:
        async with resources.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(sql.REDRIVE_CANDIDATES, ids, limit)
            publishable: list[tuple[Any, Evaluation]] = []
            for row in rows:
                binding = None
                if row["processing_state"] == ProcessingState.PUBLISH_FAILED.value:
                    binding = await cache.binding(conn, row["schema_version_id"], row["topic"])
                if binding is None:
                    results.append(RedriveResult(
                        dead_letter_id=row["dead_letter_id"], message_id=row["message_id"],
                        outcome="not_redrivable",
                        detail="no publishable telemetry (the envelope never passed its stages)",
                    ))
                    continue
                publishable.append((row, _evaluation(row, binding)))
            outcomes = await publisher.publish([ev for _, ev in publishable])
            await _record(conn, publishable, outcomes, results)
    except PG_FAILURES as exc:
        raise translate(exc) from exc
    return sorted(results, key=lambda r: r.dead_letter_id)


async def _record(conn: Conn, publishable: list[tuple[Any, Evaluation]], outcomes: list[Any],
                  results: list[RedriveResult]) -> None:
    now = datetime.now(UTC).isoformat()
    done: list[tuple[int, int, int]] = []
    failed: list[tuple[int, int, int, str]] = []
    logs: list[str] = []
    for (row, _), outcome in zip(publishable, outcomes, strict=True):
        attempt = row["attempts"] + 1
        dl, msg = row["dead_letter_id"], row["message_id"]
        if outcome.ok:
            done.append((dl, msg, attempt))
            logs.append(pass_line(msg, attempt, [StageLog("publish", "ok", outcome.duration_us)],
                                  capture=False))
            results.append(RedriveResult(dead_letter_id=dl, message_id=msg, outcome="completed"))
            continue
        message = "; ".join(f"{f.sink}: {f.message}" for f in outcome.failures)
        failures = [{"at": now, "stage": "publish", "code": f.code, "message": f"{f.sink}: "
                     f"{f.message}", "attempt": attempt, "tries": f.attempts, "redrive": True}
                    for f in outcome.failures]
        failed.append((dl, msg, attempt, orjson.dumps(failures).decode()))
        logs.append(pass_line(msg, attempt, [StageLog("publish", "failed", outcome.duration_us,
                                                      PUBLISH_FAILED, message)], capture=False))
        results.append(RedriveResult(dead_letter_id=dl, message_id=msg, outcome="failed",
                                     detail=message))
    if done:
        await conn.fetch(sql.REDRIVE_RESOLVE, *(list(c) for c in zip(*done, strict=True)))
    if failed:
        await conn.fetch(sql.REDRIVE_FAILED, *(list(c) for c in zip(*failed, strict=True)))
    if logs:
        await copy_lines(conn, sql.STAGE_PASSES, sql.STAGE_PASS_COPY, logs)

