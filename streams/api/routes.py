"""The API's route table and its session handlers. Each reads the caller's tenant from the
request and scopes to it.

:data:`ROUTES` is the one list of routes: :func:`add_routes` serves it and
:func:`streams.api.openapi.document` describes it (``/v1/openapi.json``), each route with the
``schemas.api`` models of its query, body and answer.
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
    CancelResult,
    DeadLetter,
    DeadLetterGroupPage,
    DeadLetterGroupQuery,
    DeadLetterPage,
    DeadLetterQuery,
    Device,
    DeviceActivity,
    DeviceChange,
    DeviceCredentialPage,
    DevicePage,
    DeviceQuery,
    DeviceSeries,
    DeviceSeriesQuery,
    EventStreamQuery,
    FleetLive,
    FleetQuery,
    FleetReport,
    Health,
    IssuedDeviceCredential,
    LapTrace,
    MessageExplanation,
    RedriveReport,
    ReprocessRequest,
    ResolveReport,
    ResolveRequest,
    RevokedDeviceCredentials,
    RollbackRequest,
    RollbackResult,
    Run,
    RunDag,
    RunPage,
    RunQuery,
    RunStarted,
    SchemaPage,
    SchemaQuery,
    SchemaTestReport,
    SchemaTestRequest,
    SchemaVersion,
    SchemaVersionQuery,
    Session,
    SessionDeadLetterPage,
    SessionDeadLetterQuery,
    SessionLaps,
    SessionPage,
    SessionQuery,
    SessionTrack,
    UploadForm,
    UploadReceipt,
)
from streams.adapters.errors import PG_UNREACHABLE
from streams.api import credential_routes as cred
from streams.api import event_stream
from streams.api import fleet_routes as fleet
from streams.api import path_params as pp
from streams.api import registry_routes as reg
from streams.api import run_routes as runs
from streams.api import session_dlq_routes as session_dlq
from streams.api import telemetry_routes as tel
from streams.api.bodies import query_of, reply
from streams.api.context import ApiContext, caller_of, context_of
from streams.api.inputs import path_int, path_uuid, read_field
from streams.api.openapi import Handler, Route, document, dumps
from streams.api.pages import decode_cursor, instant, page_of
from streams.errors import NotFoundError, TransientError, UsageError
from streams.identity.ids import check_device
from streams.names import Names
from streams.observability import tracing
from streams.sessions import priorities
from streams.sessions.notice import SessionNotice, run_config_from_json, session_date_from_text
from streams.sessions.quotas import check_priority
from streams.sessions.upload import StagedUpload, receipt_for
from streams.views import sessions as queries
from streams.views.lap_trace import lap_trace
from streams.views.laps import session_laps
from streams.views.track import session_track

__all__ = ["OPENAPI", "ROUTES", "add_routes"]

_CHUNK = 1 << 20
# How long POST /v1/sessions waits for intake to create the run before answering without it.
_RUN_WAIT_S = 5.0
# The form fields an upload reads (anything else is skipped unread).
_FIELDS = frozenset({"device", "priority", "config", "title", "date"})
_TITLE_MAX = 500  # SessionNotice.title's bound, checked here to answer 400, not 500


def add_routes(app: web.Application) -> None:
    """Serve every route of :data:`ROUTES` on ``app``."""
    for route in ROUTES:  # GET routes answer HEAD too (aiohttp's add_get)
        if route.method == "GET":
            app.router.add_get(route.path, _served(route), name=route.operation_id)
        else:
            app.router.add_route(route.method, route.path, _served(route),
                                 name=route.operation_id)  # fmt: skip
    event_stream.setup(app)


def _served(route: Route) -> Handler:
    """``route``'s handler behind what the table declares for it: path parameters of their
    kinds (a 400 otherwise, before the handler runs) and every not-found answered with the
    route's one text (:attr:`Route.not_found`: never a text a domain function worded)."""
    not_found = route.not_found or "not found"

    async def serve(request: web.Request) -> web.StreamResponse:
        pp.check_path(request, route.path_types)
        try:
            return await route.handler(request)
        except NotFoundError:
            raise NotFoundError(not_found) from None

    return serve


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
    return reply(Health(status="ok" if ok else "degraded", checks=checks), 200 if ok else 503)


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI document of this API (the same as the committed ``docs/openapi.json``)."""
    return web.Response(body=OPENAPI, content_type="application/json")


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


async def get_lap_trace(request: web.Request) -> web.Response:
    """One lap of the active run as speed over distance (the console overlays two)."""
    ctx, caller = context_of(request), caller_of(request)
    lap = path_int(request, "lap")
    async with ctx.pool.acquire() as conn:
        trace = await lap_trace(conn, ctx.store, caller.tenant_id, path_uuid(request), lap)
    return reply(trace)


async def get_run(request: web.Request) -> web.Response:
    caller = caller_of(request)
    async with context_of(request).pool.acquire() as conn:
        run = await queries.get_run(conn, caller.tenant_id, path_uuid(request))
    return reply(run)


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
_SESSIONS, _RUNS, _DEVICES, _SCHEMAS = "sessions", "runs", "devices", "schemas"
# Each path's parameters (their kinds: schema and check) and the one text of its 404.
_SESSION, _RUN = {"id": pp.UUID_ID}, {"id": pp.UUID_ID}
_DEVICE, _SCHEMA, _GROUP = {"device": pp.DEVICE}, {"name": pp.SCHEMA_NAME}, {"group": pp.GROUP}
_DEAD_LETTER = {"id": pp.NUMERIC_ID}
_NO_SESSION, _NO_RUN, _NO_DEVICE = "no such session", "no such run", "no such device"
_NO_GROUP = "no such dead-letter group with open dead letters"
_NO_DEAD_LETTER = "no such dead letter"
_CREDENTIAL_HELP = (
    "The device connects to NATS (or its MQTT listener) with `username` as the user name and "
    "`secret` as the password. The secret is shown once: Tideway keeps only its SHA-256, so a "
    "lost secret is replaced (rotate), never recovered."
)
_DLQ = "dead letters"

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/healthz", handler=healthz, tag="service", public=True,
          summary="Postgres and NATS reachable (503 when not)", response=Health),
    Route(method="GET", path="/v1/openapi.json", handler=openapi, tag="service", public=True,
          summary="This document",
          content={"application/json": {"schema": {"type": "object"}}}),
    # -- sessions and runs
    Route(method="POST", path="/v1/sessions", handler=post_session, tag=_SESSIONS,
          summary="Upload a session's files", status=202, response=UploadReceipt,
          request_content=_UPLOAD, description=_UPLOAD_HELP, errors=(413, 422, 429)),
    Route(method="GET", path="/v1/sessions", handler=list_sessions, tag=_SESSIONS,
          summary="The caller's sessions, newest first", query=SessionQuery,
          response=SessionPage),
    Route(method="GET", path="/v1/sessions/{id}", handler=get_session, tag=_SESSIONS,
          summary="One session with its runs and artifacts", response=Session,
          path_types=_SESSION, not_found=_NO_SESSION),
    Route(method="GET", path="/v1/sessions/{id}/track", handler=get_session_track,
          tag=_SESSIONS, summary="The active run's downsampled GNSS track, for drawing",
          response=SessionTrack, path_types=_SESSION, not_found=_NO_SESSION),
    Route(method="GET", path="/v1/sessions/{id}/laps", handler=get_session_laps,
          tag=_SESSIONS, summary="The active run's laps (one row each) and start/finish line",
          response=SessionLaps, path_types=_SESSION, not_found=_NO_SESSION),
    Route(method="GET", path="/v1/sessions/{id}/laps/{lap}/trace", handler=get_lap_trace,
          tag=_SESSIONS, summary="One lap of the active run as speed over distance",
          response=LapTrace, path_types={"id": pp.UUID_ID, "lap": pp.LAP},
          not_found="no such session, or its active run has no such lap"),
    Route(method="POST", path="/v1/sessions/{id}/reprocess", handler=runs.reprocess_session,
          tag=_SESSIONS, summary="Start a new run with the current versions (blue/green)",
          status=202, body=ReprocessRequest, response=RunStarted, path_types=_SESSION,
          not_found=_NO_SESSION, errors=(422,)),
    Route(method="POST", path="/v1/sessions/{id}/rollback", handler=runs.rollback_session,
          tag=_SESSIONS, summary="Point the session back at its previous good run",
          body=RollbackRequest, response=RollbackResult, path_types=_SESSION,
          not_found="no such session, or `to_run` is not one of its runs", errors=(409,)),
    Route(method="GET", path="/v1/runs", handler=runs.list_runs_, tag=_RUNS,
          summary="The caller's runs, newest first", query=RunQuery, response=RunPage),
    Route(method="GET", path="/v1/runs/{id}", handler=get_run, tag=_RUNS,
          summary="One run: status, summary, features, jobs, datasets", response=Run,
          path_types=_RUN, not_found=_NO_RUN),
    Route(method="GET", path="/v1/runs/{id}/dag", handler=runs.get_run_dag, tag=_RUNS,
          summary="A run's DAG: jobs in dependency order with edges and attempts",
          response=RunDag, path_types=_RUN, not_found=_NO_RUN),
    Route(method="POST", path="/v1/runs/{id}/cancel", handler=runs.cancel_run, tag=_RUNS,
          summary="Cancel a run (running jobs stop at their next checkpoint)",
          response=CancelResult, path_types=_RUN, not_found=_NO_RUN, errors=(409,)),
    Route(method="POST", path="/v1/runs/{id}/retry", handler=runs.retry_run, tag=_RUNS,
          summary="Start a new run repeating a failed, cancelled or partial one", status=202,
          response=RunStarted, path_types=_RUN, not_found=_NO_RUN, errors=(409,)),
    # -- devices and schemas
    Route(method="GET", path="/v1/fleet", handler=fleet.get_fleet, tag=_DEVICES,
          summary="Ingest by status, open dead letters and each device's data quality over a "
                  "recent window", query=FleetQuery, response=FleetReport),
    Route(method="GET", path="/v1/fleet/live", handler=fleet.get_fleet_live, tag=_DEVICES,
          summary="End-to-end ingest latency over the last 5 min and the ingest consumer's "
                  "pending counts", response=FleetLive),
    Route(method="GET", path="/v1/devices", handler=reg.list_devices, tag=_DEVICES,
          summary="The caller's devices by id", query=DeviceQuery, response=DevicePage),
    Route(method="GET", path="/v1/devices/{device}", handler=reg.get_device, tag=_DEVICES,
          summary="One device", response=Device, path_types=_DEVICE, not_found=_NO_DEVICE),
    Route(method="GET", path="/v1/devices/{device}/activity", handler=fleet.get_device_activity,
          tag=_DEVICES, summary="The device's hot state and its newest envelopes",
          response=DeviceActivity, path_types=_DEVICE, not_found=_NO_DEVICE),
    Route(method="GET", path="/v1/devices/{device}/series", handler=fleet.get_device_series,
          tag=_DEVICES, summary="The device's numeric parameters over a recent window, bounded "
                                "for charts (ClickHouse)", query=DeviceSeriesQuery,
          response=DeviceSeries, path_types=_DEVICE, not_found=_NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/activate", handler=reg.activate_device,
          tag=_DEVICES, summary="Process and publish the device's envelopes",
          response=DeviceChange, path_types=_DEVICE, not_found=_NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/deactivate", handler=reg.deactivate_device,
          tag=_DEVICES, summary="Record the device's envelopes, skip mutate/derive/publish",
          response=DeviceChange, path_types=_DEVICE, not_found=_NO_DEVICE),
    Route(method="GET", path="/v1/devices/{device}/credentials", handler=cred.list_credentials,
          tag=_DEVICES, summary="The device's NATS/MQTT credentials, oldest first (never a "
                                "secret)", response=DeviceCredentialPage, path_types=_DEVICE,
          not_found=_NO_DEVICE),
    Route(method="POST", path="/v1/devices/{device}/credentials",
          handler=cred.issue_credential, tag=_DEVICES,
          summary="Issue a credential (its secret is in this answer only)", status=201,
          response=IssuedDeviceCredential, headers=cred.NO_STORE, path_types=_DEVICE,
          not_found=_NO_DEVICE, description=_CREDENTIAL_HELP),
    Route(method="POST", path="/v1/devices/{device}/credentials/rotate",
          handler=cred.rotate_credentials, tag=_DEVICES,
          summary="Issue a credential and retire every other of the device, at once",
          status=201, response=IssuedDeviceCredential, headers=cred.NO_STORE,
          path_types=_DEVICE, not_found=_NO_DEVICE, description=_CREDENTIAL_HELP),
    Route(method="POST", path="/v1/devices/{device}/credentials/revoke",
          handler=cred.revoke_credentials, tag=_DEVICES,
          summary="Retire every valid credential of the device",
          response=RevokedDeviceCredentials, path_types=_DEVICE, not_found=_NO_DEVICE),
    Route(method="DELETE", path="/v1/devices/{device}/credentials/{key_id}",
          handler=cred.revoke_credential, tag=_DEVICES,
          summary="Retire one valid credential (404 when it is not one)",
          response=RevokedDeviceCredentials,
          path_types={"device": pp.DEVICE, "key_id": pp.KEY_ID},
          not_found="no such device, or no valid credential of it with this key id"),
    Route(method="GET", path="/v1/schemas", handler=reg.list_schemas, tag=_SCHEMAS,
          summary="The caller's schemas by name", query=SchemaQuery, response=SchemaPage),
    Route(method="GET", path="/v1/schemas/{name}", handler=reg.get_schema, tag=_SCHEMAS,
          summary="One version of a schema with its parameters", query=SchemaVersionQuery,
          response=SchemaVersion, path_types=_SCHEMA,
          not_found="no such schema, or no such version of it"),
    Route(method="POST", path="/v1/schemas/{name}/test", handler=reg.test_schema, tag=_SCHEMAS,
          summary="Run a sample through validate, mutate and derive", body=SchemaTestRequest,
          response=SchemaTestReport, path_types=_SCHEMA,
          not_found="no such schema, or no such version or topic of it", errors=(422,)),
    # -- dead letters and envelopes
    Route(method="GET", path="/v1/dead-letter-groups", handler=tel.list_dead_letter_groups,
          tag=_DLQ, summary="Dead letters grouped by error signature, with counts and a sample",
          query=DeadLetterGroupQuery, response=DeadLetterGroupPage),
    Route(method="POST", path="/v1/dead-letter-groups/{group}/redrive", handler=tel.redrive_group,
          tag=_DLQ, summary="Redrive every open dead letter of a group",
          response=RedriveReport, path_types=_GROUP, not_found=_NO_GROUP, errors=(422,)),
    Route(method="POST", path="/v1/dead-letter-groups/{group}/resolve", handler=tel.resolve_group,
          tag=_DLQ, summary="Resolve every open dead letter of a group", body=ResolveRequest,
          response=ResolveReport, path_types=_GROUP, not_found=_NO_GROUP),
    Route(method="GET", path="/v1/dead-letters", handler=tel.list_dead_letters, tag=_DLQ,
          summary="Dead letters (of one group), oldest first", query=DeadLetterQuery,
          response=DeadLetterPage, not_found="no such dead-letter group"),
    Route(method="GET", path="/v1/dead-letters/{id}", handler=tel.get_dead_letter, tag=_DLQ,
          summary="One dead letter with its original envelope", response=DeadLetter,
          path_types=_DEAD_LETTER, not_found=_NO_DEAD_LETTER),
    Route(method="POST", path="/v1/dead-letters/{id}/redrive", handler=tel.redrive_dead_letter,
          tag=_DLQ, summary="Re-run publish for one dead letter", response=RedriveReport,
          path_types=_DEAD_LETTER, not_found=_NO_DEAD_LETTER, errors=(422,)),
    Route(method="POST", path="/v1/dead-letters/{id}/resolve", handler=tel.resolve_dead_letter,
          tag=_DLQ, summary="Close one dead letter with a note", body=ResolveRequest,
          response=ResolveReport, path_types=_DEAD_LETTER, not_found=_NO_DEAD_LETTER),
    Route(method="GET", path="/v1/session-dead-letters",
          handler=session_dlq.list_session_dead_letters, tag=_DLQ,
          summary="Session notices intake dead-lettered, oldest first",
          query=SessionDeadLetterQuery, response=SessionDeadLetterPage),
    Route(method="GET", path="/v1/events", handler=event_stream.stream_events, tag="events",
          summary="The caller's domain events, live (server-sent events)",
          description=(
              "One SSE message per event: `id` its sequence in the EVENTS stream, `event` its "
              "type (`session.published`, `run.<state>`), `data` its JSON body. Events are "
              "written in the transaction of the change they announce (an outbox) and "
              "delivered at least once, in commit order per run and session. Send "
              "`Last-Event-ID` (or `last_event_id`) to resume after a gap. See docs/api.md."
          ),
          query=EventStreamQuery,
          content={"text/event-stream": {"schema": {"type": "string"}}}),
    Route(method="GET", path="/v1/messages/{id}", handler=tel.explain_message, tag="envelopes",
          summary="Explain one envelope (by id, dedupe key or digest)",
          response=MessageExplanation, path_types={"id": pp.MESSAGE},
          not_found="no such envelope"),
)  # fmt: skip

OPENAPI: bytes = dumps(document(ROUTES))
"""The served document (made once: the table does not change while the process runs)."""
