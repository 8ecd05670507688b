"""The API's handlers. Each reads the caller's tenant from the request and scopes to it."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import ValidationError

from streams.api.context import caller_of, context_of
from streams.api.inputs import read_field
from streams.errors import UsageError
from streams.names import Names
from streams.observability import tracing
from streams.sessions import priorities, queries
from streams.sessions.lap_report import session_laps
from streams.sessions.notice import SessionNotice, check_run_config
from streams.sessions.quotas import check_priority
from streams.sessions.tenancy import check_device
from streams.sessions.upload import StagedUpload, receipt_for

__all__ = ["add_routes"]

_CHUNK = 1 << 20
# How long POST /v1/sessions waits for intake to create the run before answering without it.
_RUN_WAIT_S = 5.0
# The form fields an upload reads (anything else is skipped unread).
_FIELDS = frozenset({"device", "priority", "config", "title", "date"})
_TITLE_MAX = 500  # SessionNotice.title's bound, checked here to answer 400, not 500


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/healthz", healthz)
    app.router.add_post("/v1/sessions", post_session)
    app.router.add_get("/v1/sessions", list_sessions)
    app.router.add_get("/v1/sessions/{id}", get_session)
    app.router.add_get("/v1/sessions/{id}/laps", get_session_laps)
    app.router.add_get("/v1/runs/{id}", get_run)


def _json(data: Any, status: int = 200) -> web.Response:
    body = orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS)
    return web.Response(body=body, status=status, content_type="application/json")


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise UsageError(f"not an id: {value!r}") from exc


async def healthz(request: web.Request) -> web.Response:
    ctx = context_of(request)
    checks: dict[str, bool] = {"nats": ctx.nats.is_connected}
    try:
        async with asyncio.timeout(2):
            async with ctx.pool.acquire() as conn:
                checks["postgres"] = await conn.fetchval("SELECT true")
    except (OSError, TimeoutError, Exception):  # any failure means "not healthy"
        checks["postgres"] = False
    ok = all(checks.values())
    return _json({"status": "ok" if ok else "degraded", "checks": checks}, 200 if ok else 503)


async def list_sessions(request: web.Request) -> web.Response:
    caller = caller_of(request)
    device = request.query.get("device")
    limit = _int(request.query.get("limit", "50"), "limit", 1, 1000)
    async with context_of(request).pool.acquire() as conn:
        rows = await queries.list_sessions(conn, caller.tenant_id, device=device, limit=limit)
    return _json({"sessions": rows})


async def get_session(request: web.Request) -> web.Response:
    caller = caller_of(request)
    async with context_of(request).pool.acquire() as conn:
        row = await queries.get_session(conn, caller.tenant_id, _uuid(request.match_info["id"]))
    return _json(row)


async def get_session_laps(request: web.Request) -> web.Response:
    """The active run's laps, one row each, and the start/finish line that timed them."""
    ctx, caller = context_of(request), caller_of(request)
    async with ctx.pool.acquire() as conn:
        report = await session_laps(
            conn, ctx.store, caller.tenant_id, _uuid(request.match_info["id"])
        )
    return _json(report.as_json())


async def get_run(request: web.Request) -> web.Response:
    caller = caller_of(request)
    async with context_of(request).pool.acquire() as conn:
        row = await queries.get_run(conn, caller.tenant_id, _uuid(request.match_info["id"]))
    return _json(row)


def _int(raw: str, name: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise UsageError(f"{name} must be an integer") from exc
    if not lo <= value <= hi:
        raise UsageError(f"{name} must be between {lo} and {hi}")
    return value


def _config(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"config is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise UsageError("config must be a JSON object")
    if _has_nul(value):  # JSON may spell it "\u0000"; Postgres jsonb refuses it
        raise UsageError("config contains a NUL character")
    return check_run_config(value)


def _date(raw: str | None) -> dt.date | None:
    """The upload's ``date`` field (``YYYY-MM-DD``): the day a dateless log was recorded."""
    if not raw:
        return None
    try:
        return dt.date.fromisoformat(raw)
    except ValueError as exc:
        raise UsageError("date must be YYYY-MM-DD") from exc


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


async def _part_chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await part.read_chunk(_CHUNK):
        yield chunk


async def _next_part(reader: MultipartReader) -> BodyPartReader | None:
    try:
        part = await reader.next()
    except (ValueError, HttpProcessingError) as exc:  # broken framing or part headers
        raise UsageError(f"malformed multipart body: {exc}") from exc
    if part is not None and not isinstance(part, BodyPartReader):
        raise UsageError("nested multipart bodies are not supported")
    return part


async def _read_upload(request: web.Request, staged: StagedUpload) -> dict[str, str]:
    """Stage the request's files and return its fields (query first, then form fields)."""
    fields: dict[str, str] = dict(request.query)
    if not request.content_type.startswith("multipart/"):
        name = fields.get("filename") or "upload.bin"
        await staged.add(name, request.content.iter_chunked(_CHUNK))
        return fields
    reader = await request.multipart()
    while (part := await _next_part(reader)) is not None:
        if part.filename is not None:
            await staged.add(part.filename, _part_chunks(part))
        elif part.name in _FIELDS:
            fields[part.name] = await read_field(part, part.name)
    return fields


async def post_session(request: web.Request) -> web.Response:
    """Upload a session: stage the files, validate everything, store, publish, return ids.

    Nothing reaches its final key before the whole request has been read and validated, so a
    refused upload stores nothing (see :class:`~streams.sessions.upload.StagedUpload`).
    """
    # The upload is a span continuing the caller's W3C trace context, if it sent one (a new
    # trace otherwise); the notice carries it on to intake and the run.
    with tracing.continue_trace("session.upload", request.headers.get("traceparent"),
                                {"tideway.route": "POST /v1/sessions"}) as trace:
        return await _post_session(request, trace)


async def _post_session(request: web.Request, traceparent: str | None) -> web.Response:
    ctx, caller = context_of(request), caller_of(request)
    staged = StagedUpload(
        ctx.store,
        caller.tenant,
        max_bytes=ctx.settings.worker.max_artifact_bytes,
        connect=ctx.pool.acquire,
        limits=ctx.settings.quotas,
    )
    async with staged:
        fields = await _read_upload(request, staged)
        if not staged.artifacts:
            raise UsageError("no file in the request")
        device = check_device(fields.get("device", ""))
        priority = _int(fields.get("priority", str(priorities.UPLOAD)), "priority", -1000, 1000)
        async with ctx.pool.acquire() as conn:  # an API key cannot go above its tenant's
            await check_priority(conn, tenant_id=caller.tenant_id, priority=priority,
                                 limits=ctx.settings.quotas)
        try:
            notice = SessionNotice(
                artifacts=staged.artifacts,
                priority=priority,
                config=_config(fields.get("config")),
                requested_by=f"api:{caller.key_id}",
                title=_title(fields.get("title")),
                date=_date(fields.get("date")),
            )
        except ValidationError as exc:  # the checks above should leave nothing for pydantic
            raise UsageError(f"invalid upload: {exc.errors()[0]['msg']}") from exc
        names = Names(namespace=ctx.settings.namespace)
        receipt = receipt_for(
            tenant=caller.tenant, device=device, artifacts=staged.artifacts, names=names
        )
        await staged.publish(ctx.nats.jetstream(), receipt, notice, traceparent=traceparent)
        # Still inside the block: the files count as in flight until intake has the run.
        run_id = await _wait_for_run(ctx.pool, caller.tenant_id, receipt.artifact_set_hash)
    body = receipt.as_dict()
    body["run_id"] = str(run_id) if run_id else None
    body["links"] = {
        "session": f"/v1/sessions/{receipt.session_id}",
        "run": f"/v1/runs/{run_id}" if run_id else None,
    }
    return _json(body, status=202)


def _title(raw: str | None) -> str | None:
    if raw is not None and len(raw) > _TITLE_MAX:
        raise UsageError(f"title is longer than {_TITLE_MAX} characters")
    return raw


async def _wait_for_run(pool: Any, tenant_id: uuid.UUID, key: str) -> uuid.UUID | None:
    deadline = time.monotonic() + _RUN_WAIT_S
    delay = 0.02
    while True:
        async with pool.acquire() as conn:
            found = await queries.run_id_by_key(conn, tenant_id, key)
        if found is not None or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)
