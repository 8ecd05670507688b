"""Processing runs as the API's models, for ``tideway runs list|show`` and the HTTP API.

``list_runs`` answers :class:`~schemas.api.RunSummary` rows. ``show_run`` answers the run with
its DAG (:class:`~schemas.api.RunDag`): every job in dependency order with its edges, state,
attempts (spec 004's step history) and timings, plus the run's gating decisions and feature
flags. Pass ``tenant_id`` to scope a lookup to one tenant (the API always does).
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime

from schemas.api import DagAttempt, DagEdge, DagJob, RunDag, RunSummary
from streams.adapters.postgres import Conn
from streams.errors import NotFoundError

_LIST = """
SELECT r.id, t.name AS tenant, r.session_id, r.status, r.priority, r.requested_by,
       r.created_at, r.started_at, r.completed_at, r.jobs_total, r.jobs_open,
       r.failure_reason, r.retry_of
FROM processing_runs r JOIN tenants t ON t.id = r.tenant_id
WHERE ($1::uuid IS NULL OR r.tenant_id = $1)
  AND ($2::uuid IS NULL OR r.session_id = $2)
  AND ($3::text IS NULL OR r.status = $3)
  AND ($5::timestamptz IS NULL OR (r.created_at, r.id) < ($5::timestamptz, $6::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT $4
"""  # $5, $6: the (created_at, id) of the last row of the previous page (keyset paging)

_RUN = """
SELECT r.*, t.name AS tenant,
       coalesce((SELECT jsonb_agg(jsonb_build_object('id', a.id, 'filename', a.filename,
                     'sha256', a.sha256, 'bytes', a.bytes) ORDER BY ra.position)
                 FROM run_artifacts ra JOIN artifacts a ON a.id = ra.artifact_id
                 WHERE ra.run_id = r.id), '[]'::jsonb) AS artifacts
FROM processing_runs r JOIN tenants t ON t.id = r.tenant_id
WHERE r.id = $1 AND ($2::uuid IS NULL OR r.tenant_id = $2)
"""

_JOBS = """
SELECT j.*,
       coalesce(dep.edges, '[]'::jsonb) AS deps,
       CASE WHEN j.state NOT IN ('created', 'skipped') AND coalesce(dep.all_done, true)
            THEN least(greatest(j.created_at, dep.last_done), j.started_at) END AS queued_at,
       coalesce((SELECT array_agg(ds.name ORDER BY ds.name) FROM derived_datasets ds
                 WHERE ds.job_id = j.id), '{}') AS datasets
FROM jobs j
LEFT JOIN LATERAL (
    SELECT jsonb_agg(jsonb_build_object('on', d.name, 'hard', e.hard) ORDER BY d.name) AS edges,
           max(d.finished_at) AS last_done,
           bool_and(d.finished_at IS NOT NULL) AS all_done
    FROM job_edges e JOIN jobs d ON d.id = e.depends_on_id
    WHERE e.job_id = j.id
) dep ON true
WHERE j.run_id = $1
ORDER BY j.created_at, j.name
"""  # queued_at: the job left ``created`` when its last dependency finished (``deps_pending``
# reached 0, streams.jobs.sql) - no column records it, the dependencies' ``finished_at`` do.
# A job skipped or cancelled while some dependency was open never queued. Capped at the job's
# start: the dependency's end and the claim take ``now`` from different workers' clocks, so the
# claim can read a fraction of a millisecond earlier than the end that released it.

_ATTEMPTS = """
SELECT a.* FROM job_attempts a JOIN jobs j ON j.id = a.job_id
WHERE j.run_id = $1 ORDER BY a.job_id, a.attempt_number
"""


async def list_runs(
    conn: Conn,
    *,
    tenant_id: uuid.UUID | None = None,
    session_id: uuid.UUID | None = None,
    status: str | None = None,
    limit: int = 50,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[RunSummary]:
    """Newest runs first, optionally for one tenant, session or status; only those after the
    ``(created_at, id)`` of ``after`` in that order when it is given."""
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(_LIST, tenant_id, session_id, status, limit, at, last)
    return [RunSummary.model_validate(dict(row)) for row in rows]


async def show_run(conn: Conn, run_id: uuid.UUID, *, tenant_id: uuid.UUID | None = None) -> RunDag:
    """The run with its DAG; raises ``NotFoundError`` (also for another tenant's run)."""
    run = await conn.fetchrow(_RUN, run_id, tenant_id)
    if run is None:
        raise NotFoundError(f"no run {run_id}")
    attempts: dict[uuid.UUID, list[DagAttempt]] = {}
    for a in await conn.fetch(_ATTEMPTS, run_id):
        attempts.setdefault(a["job_id"], []).append(
            DagAttempt(
                number=a["attempt_number"],
                status=a["status"],
                worker=a["worker_id"],
                started_at=a["started_at"],
                ended_at=a["ended_at"],
                duration_s=(a["metrics"] or {}).get("duration_s"),
                error_code=a["error_sub_type"],
                error_type=a["error_type"],
                error_source=a["error_source"],
                severity=a["error_severity"],
                message=a["error_message"],
            )
        )
    jobs = [
        DagJob(
            id=j["id"],
            name=j["name"],
            job_type=j["job_type"],
            state=j["state"],
            critical=j["critical"],
            pool=j["pool"],
            heavy=j["heavy"],
            deps=[DagEdge(on=d["on"], hard=d["hard"]) for d in j["deps"]],
            attempt_count=j["attempt_count"],
            max_attempts=j["max_attempts"],
            locked_by=j["locked_by"],
            created_at=j["created_at"],
            queued_at=j["queued_at"],
            next_run_at=j["next_run_at"],
            started_at=j["started_at"],
            finished_at=j["finished_at"],
            busy_s=round(sum(a.duration_s or 0.0 for a in attempts.get(j["id"], ())), 3),
            skip_reason=j["skip_reason"],
            last_error_code=j["last_error_code"],
            last_error_message=j["last_error_message"],
            datasets=list(j["datasets"]),
            attempts=attempts.get(j["id"], []),
        )
        for j in await conn.fetch(_JOBS, run_id)
    ]
    return RunDag(
        run_id=run["id"],
        status=run["status"],
        run=RunSummary.model_validate(dict(run)),
        config=run["config"],
        versions={
            "parser": run["parser_version"],
            "pipeline": run["pipeline_version"],
            "fusion": run["fusion_version"],
        },
        artifacts=run["artifacts"],
        gating=run["gating"],
        features_available=run["features_available"],
        feature_reasons=run["feature_reasons"],
        summary=run["summary"],
        jobs=dependency_order(jobs),
    )


# A good run the drift gate held back (and nobody promoted) counts as ``held_back``.
_STATUS_COUNTS = """
SELECT CASE WHEN r.status IN ('succeeded', 'partial')
             AND coalesce((r.summary #>> '{drift,exceeded}')::boolean, false)
             AND s.active_run_id IS DISTINCT FROM r.id THEN 'held_back'
            ELSE r.status END AS status,
       count(*) AS n
FROM processing_runs r JOIN sessions s ON s.id = r.session_id
WHERE r.id = ANY($1)
GROUP BY 1
"""


async def status_counts(conn: Conn, run_ids: list[uuid.UUID]) -> Counter[str]:
    """How many of ``run_ids`` are in each status (a backfill's follow-up); a run the drift
    gate held back is ``held_back`` (``DRIFT_EXCEEDED``), not ``succeeded``."""
    return Counter({r["status"]: r["n"] for r in await conn.fetch(_STATUS_COUNTS, run_ids)})


def dependency_order(jobs: list[DagJob]) -> list[DagJob]:
    """``jobs`` with every dependency before its dependents (stable otherwise)."""
    by_name = {job.name: job for job in jobs}
    placed: set[str] = set()
    ordered: list[DagJob] = []

    def place(job: DagJob) -> None:
        if job.name in placed:
            return
        placed.add(job.name)  # before recursing: a (corrupt) cycle cannot loop forever
        for dep in job.deps:
            if dep.on in by_name:
                place(by_name[dep.on])
        ordered.append(job)

    for job in jobs:
        place(job)
    return ordered
