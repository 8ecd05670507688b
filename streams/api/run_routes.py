"""Run and session actions: runs list, cancel and retry; session reprocess and rollback.

Each checks that the run or session is the caller's before acting (another tenant's id is
"not found"), then calls the function the CLI command calls.
"""

from __future__ import annotations

import uuid

from aiohttp import web

from schemas.api import (
    CancelResult,
    ReprocessRequest,
    RollbackRequest,
    RollbackResult,
    RunPage,
    RunQuery,
    RunStarted,
    RunSummary,
)
from streams.api.bodies import body_of, query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_uuid
from streams.api.pages import decode_cursor, instant, page_of
from streams.jobs import queue, run_actions
from streams.sessions.notice import check_run_config
from streams.sessions.reprocess import reprocess, rollback
from streams.views import sessions as queries
from streams.views.runs import list_runs, show_run

__all__ = [
    "cancel_run",
    "get_run_dag",
    "list_runs_",
    "reprocess_session",
    "retry_run",
    "rollback_session",
]


def _key(row: RunSummary) -> tuple[str, str]:
    return row.created_at.isoformat(), str(row.id)


async def list_runs_(request: web.Request) -> web.Response:
    caller, q = caller_of(request), query_of(request, RunQuery)
    after = decode_cursor(q.cursor, instant, uuid.UUID)
    async with context_of(request).pool.acquire() as conn:
        rows = await list_runs(
            conn,
            tenant_id=caller.tenant_id,
            session_id=q.session,
            status=q.status,
            limit=q.limit + 1,
            after=(after[0], after[1]) if after else None,
        )
    items, next_ = page_of(request, rows, q.limit, _key)
    return reply(RunPage(items=items, next=next_))


async def get_run_dag(request: web.Request) -> web.Response:
    caller, run_id = caller_of(request), path_uuid(request)
    async with context_of(request).pool.acquire() as conn:
        dag = await show_run(conn, run_id, tenant_id=caller.tenant_id)
    return reply(dag)


async def cancel_run(request: web.Request) -> web.Response:
    ctx, caller, run_id = context_of(request), caller_of(request), path_uuid(request)
    async with ctx.pool.acquire() as conn:
        await queries.check_run(conn, caller.tenant_id, run_id)
        done = await run_actions.cancel_run(conn, run_id, channel=queue.jobs_channel(ctx.settings))
    return reply(
        CancelResult(
            run_id=done.run_id,
            status=done.status.value,
            cancelled=done.cancelled,
            requested=done.requested,
        )
    )


async def retry_run(request: web.Request) -> web.Response:
    ctx, caller, run_id = context_of(request), caller_of(request), path_uuid(request)
    async with ctx.pool.acquire() as conn:
        await queries.check_run(conn, caller.tenant_id, run_id)
        new = await run_actions.retry_run(
            conn,
            run_id,
            requested_by=f"api:{caller.key_id}",
            channel=queue.jobs_channel(ctx.settings),
            default_attempts=ctx.settings.retry.job_max_attempts,
        )
    return reply(RunStarted(run_id=new.run_id, created=new.created), status=202)


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
