"""Sessions and a session's runs as the API's models (``tideway sessions list|show``,
``GET /v1/sessions``, ``GET /v1/sessions/{id}``, ``GET /v1/runs/{id}``), always scoped to one
tenant.

``list_sessions`` answers :class:`~schemas.api.SessionSummary` rows, ``get_session`` a
:class:`~schemas.api.Session` with its runs and artifacts, ``get_run`` a
:class:`~schemas.api.Run` with its jobs and datasets. Every statement takes the tenant id and
filters on it, so an id from another tenant reads as "not found" - the same answer as an id
that does not exist.
"""

from __future__ import annotations

import datetime as dt
import uuid

from schemas.api import Run, Session, SessionSummary
from streams.adapters.postgres import Conn
from streams.errors import NotFoundError

__all__ = ["check_run", "get_run", "get_session", "list_sessions", "run_id_by_key"]

_SESSION = """
SELECT s.id, t.name AS tenant, d.external_id AS device, s.status, s.query_ready,
       s.active_run_id, s.title, s.metadata, s.created_at, s.updated_at
FROM sessions s JOIN tenants t ON t.id = s.tenant_id JOIN devices d ON d.id = s.device_id
WHERE s.id = $1 AND s.tenant_id = $2
"""

_SESSION_RUNS = """
SELECT id, status, requested_by, priority, created_at, started_at, completed_at, failure_reason
FROM processing_runs WHERE session_id = $1 AND tenant_id = $2 ORDER BY created_at, id
"""

_SESSION_ARTIFACTS = """
SELECT DISTINCT ON (a.id) a.id, a.filename, a.sha256, a.bytes, a.status, a.format_detected
FROM artifacts a JOIN run_artifacts ra ON ra.artifact_id = a.id
JOIN processing_runs r ON r.id = ra.run_id
WHERE r.session_id = $1 AND r.tenant_id = $2
ORDER BY a.id
"""

_LIST = """
SELECT s.id, d.external_id AS device, s.status, s.query_ready, s.active_run_id, s.title,
       s.created_at,
       (SELECT r.status FROM processing_runs r WHERE r.session_id = s.id
        ORDER BY r.created_at DESC LIMIT 1) AS latest_run_status
FROM sessions s JOIN devices d ON d.id = s.device_id
WHERE s.tenant_id = $1 AND ($2::text IS NULL OR d.external_id = $2)
  AND ($4::timestamptz IS NULL OR (s.created_at, s.id) < ($4::timestamptz, $5::uuid))
ORDER BY s.created_at DESC, s.id DESC
LIMIT $3
"""  # $4, $5: the (created_at, id) of the last row of the previous page (keyset paging)

_RUN = """
SELECT r.id, r.session_id, r.status, r.artifact_set_hash, r.requested_by, r.parser_version,
       r.pipeline_version, r.fusion_version, r.config, r.priority, r.jobs_total, r.jobs_open,
       r.gating, r.features_available, r.feature_reasons, r.summary, r.failure_reason,
       r.retry_of, r.created_at, r.started_at, r.completed_at,
       coalesce(s.active_run_id = r.id, false) AS active
FROM processing_runs r JOIN sessions s ON s.id = r.session_id
WHERE r.id = $1 AND r.tenant_id = $2
"""

_RUN_JOBS = """
SELECT name, job_type, state, critical, pool, attempt_count, max_attempts, skip_reason,
       last_error_code, last_error_message, created_at, started_at, finished_at
FROM jobs j WHERE run_id = $1 ORDER BY created_at, name
"""

_RUN_DATASETS = """
SELECT d.name, d.dataset_type, j.name AS job, d.storage_url, d.content_hash, d.schema_version,
       d.row_count, d.bytes, d.time_range_start, d.time_range_end
FROM derived_datasets d JOIN jobs j ON j.id = d.job_id
WHERE d.run_id = $1 ORDER BY d.name
"""


async def get_session(conn: Conn, tenant_id: uuid.UUID, session_id: uuid.UUID) -> Session:
    """A session with its runs and artifacts (raises :class:`NotFoundError`)."""
    row = await conn.fetchrow(_SESSION, session_id, tenant_id)
    if row is None:
        raise NotFoundError(f"no session {session_id}")
    runs = await conn.fetch(_SESSION_RUNS, session_id, tenant_id)
    artifacts = await conn.fetch(_SESSION_ARTIFACTS, session_id, tenant_id)
    return Session.model_validate({**dict(row), "runs": [dict(r) for r in runs],
                                   "artifacts": [dict(r) for r in artifacts]})


async def list_sessions(
    conn: Conn,
    tenant_id: uuid.UUID,
    *,
    device: str | None = None,
    limit: int = 50,
    after: tuple[dt.datetime, uuid.UUID] | None = None,
) -> list[SessionSummary]:
    """The tenant's newest sessions (optionally of one device), those after the
    ``(created_at, id)`` of ``after`` in that order when it is given."""
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(_LIST, tenant_id, device, limit, at, last)
    return [SessionSummary.model_validate(dict(r)) for r in rows]


async def get_run(conn: Conn, tenant_id: uuid.UUID, run_id: uuid.UUID) -> Run:
    """A run with its summary, feature flags, jobs and datasets (raises NotFoundError)."""
    row = await conn.fetchrow(_RUN, run_id, tenant_id)
    if row is None:
        raise NotFoundError(f"no run {run_id}")
    jobs = await conn.fetch(_RUN_JOBS, run_id)
    datasets = await conn.fetch(_RUN_DATASETS, run_id)
    # feature flags as the run reducer stored them (content included)
    return Run.model_validate({**dict(row), "jobs": [dict(r) for r in jobs],
                               "datasets": [dict(r) for r in datasets]})


async def check_run(conn: Conn, tenant_id: uuid.UUID, run_id: uuid.UUID) -> None:
    """Raise :class:`NotFoundError` unless ``run_id`` is a run of the tenant."""
    found = await conn.fetchval(
        "SELECT 1 FROM processing_runs WHERE id = $1 AND tenant_id = $2", run_id, tenant_id
    )
    if found is None:
        raise NotFoundError(f"no run {run_id}")


async def run_id_by_key(conn: Conn, tenant_id: uuid.UUID, key: str) -> uuid.UUID | None:
    """The run intake created for idempotency ``key`` (the artifact-set hash), if any."""
    found: uuid.UUID | None = await conn.fetchval(
        "SELECT id FROM processing_runs WHERE tenant_id = $1 AND idempotency_key = $2",
        tenant_id,
        key,
    )
    return found
