"""Runs: list, show, the DAG, cancel and retry (a session's reprocess and rollback, which
start or pick a run, are the session's: :mod:`streams.api.session_routes`).

Each checks that the run is the caller's before acting (another tenant's id is "not found"),
then calls the function the CLI command calls.
"""

from __future__ import annotations

import uuid

from aiohttp import web

from schemas.api import (
    BackfillSchedules,
    CancelResult,
    RollbackResult,
    Run,
    RunDag,
    RunPage,
    RunQuery,
    RunStarted,
    RunSummary,
)
from streams.api import path_params as pp
from streams.api.bodies import query_of, reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_uuid
from streams.api.openapi import Route
from streams.api.pages import decode_cursor, instant, page_of
from streams.jobs import queue, run_actions
from streams.sessions.reprocess import promote
from streams.sessions.schedules import list_schedules
from streams.views import sessions as queries
from streams.views.runs import list_runs, show_run

__all__ = ["ROUTES", "cancel_run", "get_run", "get_run_dag", "list_runs_", "retry_run"]


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


async def get_run(request: web.Request) -> web.Response:
    caller = caller_of(request)
    async with context_of(request).pool.acquire() as conn:
        run = await queries.get_run(conn, caller.tenant_id, path_uuid(request))
    return reply(run)


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


async def promote_run(request: web.Request) -> web.Response:
    """Make the run its session's active run (one the drift gate held back, say), once its
    datasets read back with their sha256 (``tideway runs promote``)."""
    ctx, caller, run_id = context_of(request), caller_of(request), path_uuid(request)
    async with ctx.pool.acquire() as conn:
        moved = await promote(conn, tenant=caller.tenant, run_id=run_id,
                              requested_by=f"api:{caller.key_id}", store=ctx.store)
    return reply(RollbackResult(session_id=moved.session_id, from_run=moved.from_run,
                                to_run=moved.to_run))


async def list_backfill_schedules(request: web.Request) -> web.Response:
    """The caller's scheduled backfills (``tideway runs schedule list``)."""
    caller = caller_of(request)
    async with context_of(request).pool.acquire() as conn:
        found = await list_schedules(conn, caller.tenant)
    return reply(BackfillSchedules(items=found, next=None))


_TAG = "runs"
_RUN = {"id": pp.UUID_ID}  # the path's parameters (their kinds: schema and check)
_NO_RUN = "no such run"  # the one text of its 404

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/runs", handler=list_runs_, tag=_TAG,
          summary="The caller's runs, newest first", query=RunQuery, response=RunPage),
    Route(method="GET", path="/v1/runs/{id}", handler=get_run, tag=_TAG,
          summary="One run: status, summary, features, jobs, datasets", response=Run,
          path_types=_RUN, not_found=_NO_RUN),
    Route(method="GET", path="/v1/runs/{id}/dag", handler=get_run_dag, tag=_TAG,
          summary="A run's DAG: jobs in dependency order with edges and attempts",
          response=RunDag, path_types=_RUN, not_found=_NO_RUN),
    Route(method="POST", path="/v1/runs/{id}/cancel", handler=cancel_run, tag=_TAG,
          summary="Cancel a run (running jobs stop at their next checkpoint)",
          response=CancelResult, path_types=_RUN, not_found=_NO_RUN, errors=(409,)),
    Route(method="POST", path="/v1/runs/{id}/retry", handler=retry_run, tag=_TAG,
          summary="Start a new run repeating a failed, cancelled or partial one", status=202,
          response=RunStarted, path_types=_RUN, not_found=_NO_RUN, errors=(409,)),
    Route(method="POST", path="/v1/runs/{id}/promote", handler=promote_run, tag=_TAG,
          summary="Make a run its session's active run (one the drift gate held back)",
          response=RollbackResult, path_types=_RUN, not_found=_NO_RUN, errors=(409,)),
    Route(method="GET", path="/v1/backfill-schedules", handler=list_backfill_schedules,
          tag=_TAG, summary="The caller's scheduled backfills: cron, next and last tick",
          response=BackfillSchedules),
)  # fmt: skip
