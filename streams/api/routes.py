"""The API's handlers. Each reads the caller's tenant from the request and scopes to it."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
from aiohttp import BodyPartReader, web

from streams.api.context import caller_of, context_of
from streams.errors import UsageError
from streams.names import Names
from streams.objects import ObjectStore, ObjectWriter, artifact_key
from streams.sessions import queries
from streams.sessions.notice import NoticeArtifact, SessionNotice
from streams.sessions.tenancy import check_device
from streams.sessions.upload import publish_notice, receipt_for

__all__ = ["add_routes"]

_CHUNK = 1 << 20
# How long POST /v1/sessions waits for intake to create the run before answering without it.
_RUN_WAIT_S = 5.0


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/healthz", healthz)
    app.router.add_post("/v1/sessions", post_session)
    app.router.add_get("/v1/sessions", list_sessions)
    app.router.add_get("/v1/sessions/{id}", get_session)
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
    return value


async def _store_stream(
    store: ObjectStore, tenant: str, name: str, chunks: Any, limit: int
) -> NoticeArtifact:
    writer: ObjectWriter = await asyncio.to_thread(store.writer, max_bytes=limit)
    try:
        async for chunk in chunks:
            await asyncio.to_thread(writer.write, chunk)
        stored = await asyncio.to_thread(writer.commit, artifact_key(tenant, writer.sha256))
    except BaseException:
        await asyncio.to_thread(writer.abort)
        raise
    if stored.size == 0:
        raise UsageError(f"{name} is empty")
    return NoticeArtifact(name=name, sha256=stored.sha256, size=stored.size)


async def _part_chunks(part: BodyPartReader) -> Any:
    while chunk := await part.read_chunk(_CHUNK):
        yield chunk


async def post_session(request: web.Request) -> web.Response:
    """Upload a session: stream files to the object store, publish a notice, return ids."""
    ctx, caller = context_of(request), caller_of(request)
    limit = ctx.settings.worker.max_artifact_bytes
    fields: dict[str, str] = dict(request.query)
    artifacts: list[NoticeArtifact] = []
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise UsageError("nested multipart bodies are not supported")
            if part.filename:
                artifacts.append(
                    await _store_stream(
                        ctx.store, caller.tenant, part.filename, _part_chunks(part), limit
                    )
                )
            elif part.name in {"device", "priority", "config", "title"}:
                fields[part.name] = (await part.read(decode=True)).decode()
    else:
        name = fields.get("filename") or "upload.bin"
        artifacts.append(
            await _store_stream(
                ctx.store, caller.tenant, name, request.content.iter_chunked(_CHUNK), limit
            )
        )
    if not artifacts:
        raise UsageError("no file in the request")
    device = check_device(fields.get("device", ""))
    notice = SessionNotice(
        artifacts=tuple(artifacts),
        priority=_int(fields.get("priority", "0"), "priority", -1000, 1000),
        config=_config(fields.get("config")),
        requested_by=f"api:{caller.key_id}",
        title=fields.get("title"),
    )
    names = Names(namespace=ctx.settings.namespace)
    receipt = receipt_for(tenant=caller.tenant, device=device, artifacts=artifacts, names=names)
    await publish_notice(
        ctx.nats.jetstream(),
        receipt.subject,
        notice,
        msg_id=f"{caller.tenant}:{receipt.artifact_set_hash}",
    )
    run_id = await _wait_for_run(ctx.pool, caller.tenant_id, receipt.artifact_set_hash)
    body = receipt.as_dict()
    body["run_id"] = str(run_id) if run_id else None
    body["links"] = {
        "session": f"/v1/sessions/{receipt.session_id}",
        "run": f"/v1/runs/{run_id}" if run_id else None,
    }
    return _json(body, status=202)


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
