"""Create processing runs: the run row, its ordered artifacts, its jobs and edges.

``enqueue_run`` is what intake (and reprocess) call once a session's artifacts are stored; it
inserts everything a :class:`~stages.jobs.planner.RunPlan` describes in one transaction and
wakes the workers. It is idempotent on ``idempotency_key``: the same key for the same tenant
returns the existing run (``created=False``) and inserts nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stages.jobs.graph import Dag
from stages.jobs.planner import RunPlan, plan_run
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS
from stages.jobs.run_state import RunState
from streams.adapters.postgres import Conn
from streams.errors import NotFoundError, UsageError
from streams.jobs import sql
from streams.jobs.model import RunVersions
from streams.jobs.settle import finalise
from streams.jobs.txn import atomically


@dataclass(frozen=True, kw_only=True)
class EnqueuedRun:
    """The run's id and whether this call created it (``False``: the key already existed)."""

    run_id: uuid.UUID
    created: bool


async def enqueue_run(
    conn: Conn,
    *,
    dag: Dag,
    tenant_id: uuid.UUID,
    session_id: uuid.UUID,
    plan: RunPlan,
    config: Mapping[str, Any],
    versions: RunVersions,
    artifact_ids: Sequence[uuid.UUID],
    artifact_set_hash: str,
    priority: int = 0,
    requested_by: str = "system",
    idempotency_key: str | None = None,
    retry_of: uuid.UUID | None = None,
    channel: str,
) -> EnqueuedRun:
    """Insert a run and its planned jobs; jobs with nothing to wait for start ``queued``.

    ``dag``: the DAG the runtime runs, whose features finalise a run planned with no job left
    to run."""
    jobs = [
        {
            "name": j.name,
            "job_type": j.job_type,
            "state": j.state.value,
            "pool": j.pool,
            "heavy": j.heavy,
            "critical": j.critical,
            "max_attempts": j.max_attempts,
            "deps_pending": j.deps_pending,
            "soft_timeout_s": j.soft_timeout_s,
            "hard_timeout_s": j.hard_timeout_s,
            "stale_after_s": j.stale_after_s,
            "skip_reason": j.skip_reason,
            "payload": dict(j.payload),
        }
        for j in plan.jobs
    ]
    edges = [{"job": e.job, "depends_on": e.depends_on, "hard": e.hard} for e in plan.edges]
    gating = [{**d.as_json(), "reported_by": "planner"} for d in plan.gating]

    async def work(c: Conn) -> EnqueuedRun:
        run_id = await c.fetchval(
            sql.INSERT_RUN,
            tenant_id,
            session_id,
            artifact_set_hash,
            idempotency_key,
            requested_by,
            versions.parser,
            versions.pipeline,
            versions.fusion,
            dict(config),
            priority,
            len(plan.jobs),
            plan.open_jobs,
            gating,
            retry_of,
        )
        if run_id is None:
            existing = await c.fetchval(sql.RUN_BY_KEY, tenant_id, idempotency_key)
            return EnqueuedRun(run_id=existing, created=False)
        if artifact_ids:
            await c.execute(sql.INSERT_RUN_ARTIFACTS, run_id, list(artifact_ids))
        await c.fetchrow(sql.INSERT_JOBS, run_id, tenant_id, priority, jobs, edges, channel)
        if plan.open_jobs == 0:
            await finalise(c, run_id, dag=dag, now=None)
        return EnqueuedRun(run_id=run_id, created=True)

    return await atomically(conn, work)


async def retry_run(
    conn: Conn,
    run_id: uuid.UUID,
    *,
    dag: Dag,
    requested_by: str = "operator",
    channel: str,
    default_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> EnqueuedRun:
    """Start a new run that repeats ``run_id``: same session, artifacts, config and pinned
    versions, planned afresh, linked by ``retry_of``. The old run stays as it was (audit);
    the session's pointer moves to the new run only if it ends succeeded or partial. The new
    run is planned from ``dag``, the DAG the runtime runs."""
    old = await conn.fetchrow(sql.RUN_FOR_RETRY, run_id)
    if old is None:
        raise NotFoundError(f"no run {run_id}")
    if old["status"] not in (RunState.FAILED, RunState.CANCELLED, RunState.PARTIAL):
        raise UsageError(
            f"run {run_id} is {old['status']}; only failed, cancelled or partial "
            "runs can be retried",
            code="RUN_NOT_RETRIABLE",
        )
    return await enqueue_run(
        conn,
        dag=dag,
        tenant_id=old["tenant_id"],
        session_id=old["session_id"],
        plan=plan_run(old["config"], dag=dag, default_attempts=default_attempts),
        config=old["config"],
        versions=RunVersions(
            parser=old["parser_version"],
            pipeline=old["pipeline_version"],
            fusion=old["fusion_version"],
        ),
        artifact_ids=old["artifact_ids"],
        artifact_set_hash=old["artifact_set_hash"],
        priority=old["priority"],
        requested_by=requested_by,
        retry_of=run_id,
        channel=channel,
    )
