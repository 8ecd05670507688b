"""Sessions: upload, list, show, the active run's track, laps and lap traces, and the
session actions (reprocess, rollback). Each reads the caller's tenant from the request and
scopes to it; another tenant's session is "not found".

An upload is staged whole before anything is stored
(:class:`~streams.sessions.upload.StagedUpload`), published as a notice for intake, and
answered once intake has made its run, or after :data:`_RUN_WAIT_S` without it. Reprocess
and rollback call the functions the CLI calls.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import ValidationError

from schemas.api import (
    LapAnalysis,
    LapTrace,
    ReprocessRequest,
    RollbackRequest,
    RollbackResult,
    RunStarted,
    Session,
    SessionLaps,
    SessionPage,
    SessionQuery,
    SessionTrack,
    UploadForm,
    UploadReceipt,
)
from stages.batch.export.files import EXPORTS
from streams.adapters.errors import PG_UNREACHABLE
from streams.api import path_params as pp
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import ApiContext, caller_of, context_of
from streams.api.inputs import path_int, path_uuid, read_field
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, instant, page_of
from streams.errors import TransientError, UsageError
from streams.identity.ids import check_device
from streams.names import Names
from streams.observability import tracing
from streams.sessions import priorities
from streams.sessions.notice import (
    SessionNotice,
    check_run_config,
    run_config_from_json,
    session_date_from_text,
)
from streams.sessions.quotas import check_priority
from streams.sessions.reprocess import reprocess, rollback
from streams.sessions.upload import StagedUpload, receipt_for
from streams.views import sessions as queries
from streams.views.export import session_export
from streams.views.lap_analysis import lap_analysis
from streams.views.lap_trace import lap_trace
from streams.views.laps import session_laps
from streams.views.track import session_track

__all__ = [
    "ROUTES",
    "get_lap_analysis",
    "get_lap_trace",
    "get_session",
    "get_session_export",
    "get_session_laps",
    "get_session_track",
    "list_sessions",
    "post_session",
    "reprocess_session",
    "rollback_session",
]

_CHUNK = 1 << 20
# How long POST /v1/sessions waits for intake to create the run before answering without it.
_RUN_WAIT_S = 5.0
# The form fields an upload reads (anything else is skipped unread).
_FIELDS = frozenset({"device", "priority", "config", "title", "date"})
_TITLE_MAX = 500  # SessionNotice.title's bound, checked here to answer 400, not 500


async def list_sessions(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, SessionQuery)
    after = decode_cursor(q.cursor, instant, uuid.UUID)
    async with context_of(request).pool.acquire() as conn:
        found = await queries.list_sessions(
            conn,
            caller.tenant_id,
            device=q.device,
            limit=q.limit + 1,
            after=(after[0], after[1]) if after else None,
        )
    items, next_ = page_of(request, found, q.limit, lambda s: (s.created_at.isoformat(), s.id))
    return reply(SessionPage(items=items, next=next_))


async def get_session(request: web.Request) -> web.Response:
    caller = caller_of(request)
    async with context_of(request).pool.acquire() as conn:
        session = await queries.get_session(conn, caller.tenant_id, path_uuid(request))
    return reply(session)


async def get_session_track(request: web.Request) -> web.Response:
    ctx, caller = context_of(request), caller_of(request)
    async with ctx.pool.acquire() as conn:
        track = await session_track(conn, ctx.store, caller.tenant_id, path_uuid(request))
    return reply(track)


async def get_session_laps(request: web.Request) -> web.Response:
    """The active run's laps, one row each, and the start/finish line that timed them."""
    ctx, caller = context_of(request), caller_of(request)
    async with ctx.pool.acquire() as conn:
        laps = await session_laps(conn, ctx.store, caller.tenant_id, path_uuid(request))
    return reply(laps)


async def _one_lap(request: web.Request, view: Any) -> web.Response:
    """``view(conn, store, tenant, session, lap)`` for the path's session and lap."""
    ctx, caller = context_of(request), caller_of(request)
    lap = path_int(request, "lap")
    async with ctx.pool.acquire() as conn:
        found = await view(conn, ctx.store, caller.tenant_id, path_uuid(request), lap)
    return reply(found)


async def get_lap_trace(request: web.Request) -> web.Response:
    """One lap of the active run as speed over distance (the console overlays two)."""
    return await _one_lap(request, lap_trace)


async def get_lap_analysis(request: web.Request) -> web.Response:
    """One lap against the reference lap: the delta channel, corners and mini-sectors."""
    return await _one_lap(request, lap_analysis)


async def get_session_export(request: web.Request) -> web.Response:
    """A file of the active run's results (laps, sectors or delta as CSV, the session as GPX
    or FIT), as an attachment named for the session."""
    ctx, caller = context_of(request), caller_of(request)
    async with ctx.pool.acquire() as conn:
        found = await session_export(conn, ctx.store, caller.tenant_id, path_uuid(request),
                                     request.match_info["file"])  # fmt: skip
    text = found.media_type.startswith("text/")
    return web.Response(
        body=found.body, content_type=found.media_type, charset="utf-8" if text else None,
        headers={"Content-Disposition": f'attachment; filename="{found.filename}"'})


async def reprocess_session(request: web.Request) -> web.Response:
    ctx, caller, session_id = context_of(request), caller_of(request), path_uuid(request)
    body = await body_of(request, ReprocessRequest)
    # The check every run config meets (the upload's, the CLI's, intake's): a misspelt key is
    # a 400 INVALID_CONFIG here, not a run that fails later.
    config = None if body.config is None else check_run_config(body.config)
    async with ctx.pool.acquire() as conn:
        new = await reprocess(
            conn,
            tenant=caller.tenant,
            session_id=session_id,
            requested_by=f"api:{caller.key_id}",
            config=config,
            priority=body.priority,
            namespace=ctx.settings.namespace,
            default_attempts=ctx.settings.retry.job_max_attempts,
        )
    return reply(RunStarted(run_id=new.run_id, created=new.created), status=202)


async def rollback_session(request: web.Request) -> web.Response:
    caller, session_id = caller_of(request), path_uuid(request)
    body = await body_of(request, RollbackRequest)
    ctx = context_of(request)
    async with ctx.pool.acquire() as conn:
        moved = await rollback(
            conn,
            tenant=caller.tenant,
            session_id=session_id,
            to_run=body.to_run,
            requested_by=f"api:{caller.key_id}",
            store=ctx.store,  # the target's datasets are read back before the pointer moves
        )
    return reply(
        RollbackResult(session_id=moved.session_id, from_run=moved.from_run, to_run=moved.to_run)
    )


# -- the upload


def _int(raw: str, name: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise UsageError(f"{name} must be an integer") from exc
    if not lo <= value <= hi:
        raise UsageError(f"{name} must be between {lo} and {hi}")
    return value


def _config(raw: str | None) -> dict[str, Any]:
    return run_config_from_json(raw) if raw else {}


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
                                {"tideway.route": "POST /v1/sessions"}) as trace:  # fmt: skip
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
        await _check_priority(ctx, caller.tenant_id, priority)
        try:
            notice = SessionNotice(
                artifacts=staged.artifacts,
                priority=priority,
                config=_config(fields.get("config")),
                requested_by=f"api:{caller.key_id}",
                title=_title(fields.get("title")),
                date=session_date_from_text(fields.get("date")),
            )
        except ValidationError as exc:  # the checks above should leave nothing for pydantic
            raise UsageError(f"invalid upload: {exc.errors()[0]['msg']}") from exc
        names = Names(namespace=ctx.settings.namespace)
        receipt = receipt_for(
            tenant=caller.tenant, device=device, artifacts=staged.artifacts, names=names
        )
        await staged.publish(ctx.nats, receipt, notice, traceparent=traceparent)
        # Still inside the block: the files count as in flight until intake has the run.
        run_id = await _wait_for_run(ctx.pool, caller.tenant_id, receipt.artifact_set_hash)
    body = receipt.as_dict()
    body["run_id"] = str(run_id) if run_id else None
    body["links"] = {
        "session": f"/v1/sessions/{receipt.session_id}",
        "run": f"/v1/runs/{run_id}" if run_id else None,
    }
    return reply(UploadReceipt.model_validate(body), status=202)


def _title(raw: str | None) -> str | None:
    if raw is not None and len(raw) > _TITLE_MAX:
        raise UsageError(f"title is longer than {_TITLE_MAX} characters")
    return raw


async def _check_priority(ctx: ApiContext, tenant_id: uuid.UUID, priority: int) -> None:
    """An API key cannot go above its tenant's maximum priority. While Postgres is
    unreachable the upload is still accepted (docs/sessions.md: no path refuses uploads in an
    outage), checked against the settings' maximum: a tenant's own ceiling is in Postgres."""
    try:
        async with ctx.pool.acquire() as conn:
            await check_priority(conn, tenant_id=tenant_id, priority=priority,
                                 limits=ctx.settings.quotas)
    except (*PG_UNREACHABLE, TimeoutError, TransientError):
        if priority > ctx.settings.quotas.max_priority:
            raise UsageError(
                f"priority {priority} is above the maximum of "
                f"{ctx.settings.quotas.max_priority}", code="PRIORITY_TOO_HIGH") from None


async def _wait_for_run(pool: Any, tenant_id: uuid.UUID, key: str) -> uuid.UUID | None:
    """The run intake made of the upload, waited for up to :data:`_RUN_WAIT_S`; ``None``
    when it has not yet, or Postgres cannot say (the notice is on the stream: the run comes)."""
    deadline = time.monotonic() + _RUN_WAIT_S
    delay = 0.02
    while True:
        try:
            async with pool.acquire() as conn:
                found = await queries.run_id_by_key(conn, tenant_id, key)
        except (*PG_UNREACHABLE, TimeoutError, TransientError):
            return None
        if found is not None or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)


def _upload_form() -> dict[str, Any]:
    """The upload's form, its ``device`` with the device id pattern (the path's kind)."""
    schema = UploadForm.model_json_schema()
    schema["properties"]["device"]["pattern"] = pp.DEVICE.pattern
    return schema


_UPLOAD = {
    "multipart/form-data": {"schema": _upload_form()},
    "application/octet-stream": {"schema": {"contentMediaType": "application/octet-stream"}},
}
_UPLOAD_HELP = (
    "Multipart: one or more `file` parts and the fields below. A raw body is one file; its "
    "fields (and `filename`) then come from the query string. Answers once intake has made "
    "the run, or after 5 s without it (`run_id` null)."
)

def _export_schema(media_type: str) -> dict[str, Any]:
    if media_type.startswith("text/") or media_type.endswith("+xml"):
        return {"type": "string"}
    return {"type": "string", "contentMediaType": media_type}


_EXPORT_HELP = (
    "CSV files have a header row, instants in ISO-8601 UTC and times to the millisecond; "
    "GPX 1.1 has one track segment per lap; FIT records are 1 s apart, its lap messages carry "
    "each lap's exact time (docs/sessions.md#export). A 409 `EXPORT_UNAVAILABLE` says what the "
    "active run lacks (no finished run yet, or a dataset it was processed without: reprocess)."
)

_TAG = "sessions"
_SESSION = {"id": pp.UUID_ID}  # the path's parameters (their kinds: schema and check)
_NO_SESSION = "no such session"  # the one text of its 404

ROUTES: tuple[Route, ...] = (
    Route(method="POST", path="/v1/sessions", handler=post_session, tag=_TAG,
          summary="Upload a session's files", status=202, response=UploadReceipt,
          request_content=_UPLOAD, description=_UPLOAD_HELP, errors=(413, 422, 429)),
    Route(method="GET", path="/v1/sessions", handler=list_sessions, tag=_TAG,
          summary="The caller's sessions, newest first", query=SessionQuery,
          response=SessionPage),
    Route(method="GET", path="/v1/sessions/{id}", handler=get_session, tag=_TAG,
          summary="One session with its runs and artifacts", response=Session,
          path_types=_SESSION, not_found=_NO_SESSION),
    Route(method="GET", path="/v1/sessions/{id}/track", handler=get_session_track,
          tag=_TAG, summary="The active run's downsampled GNSS track, for drawing",
          response=SessionTrack, path_types=_SESSION, not_found=_NO_SESSION),
    Route(method="GET", path="/v1/sessions/{id}/laps", handler=get_session_laps,
          tag=_TAG, summary="The active run's laps (one row each) and start/finish line",
          response=SessionLaps, path_types=_SESSION, not_found=_NO_SESSION),
    Route(method="GET", path="/v1/sessions/{id}/laps/{lap}/trace", handler=get_lap_trace,
          tag=_TAG, summary="One lap of the active run as speed over distance",
          response=LapTrace, path_types={"id": pp.UUID_ID, "lap": pp.LAP},
          not_found="no such session, or its active run has no such lap"),
    Route(method="GET", path="/v1/sessions/{id}/laps/{lap}/analysis", handler=get_lap_analysis,
          tag=_TAG, summary="One lap against the reference lap: delta channel, corners",
          response=LapAnalysis, path_types={"id": pp.UUID_ID, "lap": pp.LAP},
          not_found="no such session, or its active run has no such lap"),
    Route(method="GET", path="/v1/sessions/{id}/export/{file}", handler=get_session_export,
          tag=_TAG, summary="A file of the active run's results: laps, sectors or delta as "
          "CSV, the session with its laps as GPX or FIT",
          content={f.media_type: {"schema": _export_schema(f.media_type)}
                   for f in EXPORTS.values()},
          headers={"Content-Disposition": {
              "description": "`attachment; filename=\"session-<id's first 8>-<file>\"`",
              "schema": {"type": "string"}}},
          description=_EXPORT_HELP, path_types={"id": pp.UUID_ID, "file": pp.EXPORT_FILE},
          not_found=_NO_SESSION, errors=(409,)),
    Route(method="POST", path="/v1/sessions/{id}/reprocess", handler=reprocess_session,
          tag=_TAG, summary="Start a new run with the current versions (blue/green)",
          status=202, body=ReprocessRequest, response=RunStarted, path_types=_SESSION,
          not_found=_NO_SESSION, errors=(422,)),
    Route(method="POST", path="/v1/sessions/{id}/rollback", handler=rollback_session,
          tag=_TAG, summary="Point the session back at its previous good run",
          body=RollbackRequest, response=RollbackResult, path_types=_SESSION,
          not_found="no such session, or `to_run` is not one of its runs", errors=(409,)),
)  # fmt: skip
