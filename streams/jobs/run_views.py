"""Read-only views of processing runs for ``tideway runs list|show`` and the HTTP API.

``show_run`` returns the run with its DAG: every job in dependency order with its edges, state,
attempts (spec 004's step history) and timings, plus the run's gating decisions and feature
flags. Pass ``tenant_id`` to scope a lookup to one tenant (the API always does).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from streams.adapters.postgres import Conn
from streams.errors import NotFoundError
from streams.jobs.model import Row

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
       coalesce((SELECT jsonb_agg(jsonb_build_object('on', d.name, 'hard', e.hard)
                                  ORDER BY d.name)
                 FROM job_edges e JOIN jobs d ON d.id = e.depends_on_id
                 WHERE e.job_id = j.id), '[]'::jsonb) AS deps,
       coalesce((SELECT array_agg(ds.name ORDER BY ds.name) FROM derived_datasets ds
                 WHERE ds.job_id = j.id), '{}') AS datasets
FROM jobs j WHERE j.run_id = $1
ORDER BY j.created_at, j.name
"""

_ATTEMPTS = """
SELECT a.* FROM job_attempts a JOIN jobs j ON j.id = a.job_id
WHERE j.run_id = $1 ORDER BY a.job_id, a.attempt_number
"""


@dataclass(frozen=True, kw_only=True)
class RunRow:
    """One line of ``runs list``."""

    id: uuid.UUID
    tenant: str
    session_id: uuid.UUID
    status: str
    priority: int
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    jobs_total: int
    jobs_open: int
    failure_reason: str | None
    retry_of: uuid.UUID | None

    @classmethod
    def from_row(cls, row: Row) -> RunRow:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True, kw_only=True)
class AttemptView:
    """One execution try of a job."""

    number: int
    status: str
    worker: str
    started_at: datetime | None
    ended_at: datetime | None
    duration_s: float | None
    error_code: str | None
    error_type: str | None
    error_source: str | None
    severity: int | None
    message: str | None


@dataclass(frozen=True, kw_only=True)
class JobView:
    """One node of the run's DAG."""

    id: uuid.UUID
    name: str
    job_type: str
    state: str
    critical: bool
    pool: str
    heavy: bool
    deps: tuple[tuple[str, bool], ...]  # (name, hard)
    attempt_count: int
    max_attempts: int
    locked_by: str | None
    next_run_at: datetime | None
    started_at: datetime | None
    """When the first attempt was claimed (spec 004; ``jobs.started_at``)."""
    finished_at: datetime | None
    skip_reason: str | None
    last_error_code: str | None
    last_error_message: str | None
    datasets: tuple[str, ...]
    attempts: tuple[AttemptView, ...]

    @property
    def busy_s(self) -> float:
        """Seconds spent in attempts so far."""
        return sum(a.duration_s or 0.0 for a in self.attempts)


@dataclass(frozen=True, kw_only=True)
class RunView:
    """Everything ``runs show`` displays."""

    run: RunRow
    config: dict[str, Any]
    versions: dict[str, str | None]
    artifacts: list[dict[str, Any]]
    gating: list[dict[str, Any]]
    features_available: dict[str, bool]
    feature_reasons: dict[str, str]
    summary: dict[str, Any]
    jobs: tuple[JobView, ...]

    def as_json(self) -> dict[str, Any]:
        """Plain data for ``--json`` (timestamps and UUIDs are stringified by the printer)."""
        data = asdict(self)
        for job, view in zip(data["jobs"], self.jobs, strict=True):
            job["deps"] = [{"on": name, "hard": hard} for name, hard in view.deps]
            job["started_at"] = view.started_at
            job["busy_s"] = round(view.busy_s, 3)
        return data


async def list_runs(
    conn: Conn,
    *,
    tenant_id: uuid.UUID | None = None,
    session_id: uuid.UUID | None = None,
    status: str | None = None,
    limit: int = 50,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[RunRow]:
    """Newest runs first, optionally for one tenant, session or status; only those after the
    ``(created_at, id)`` of ``after`` in that order when it is given."""
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(_LIST, tenant_id, session_id, status, limit, at, last)
    return [RunRow.from_row(row) for row in rows]


async def show_run(conn: Conn, run_id: uuid.UUID, *, tenant_id: uuid.UUID | None = None) -> RunView:
    """The run with its DAG; raises ``NotFoundError`` (also for another tenant's run)."""
    run = await conn.fetchrow(_RUN, run_id, tenant_id)
    if run is None:
        raise NotFoundError(f"no run {run_id}")
    attempts: dict[uuid.UUID, list[AttemptView]] = {}
    for a in await conn.fetch(_ATTEMPTS, run_id):
        attempts.setdefault(a["job_id"], []).append(
            AttemptView(
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
        JobView(
            id=j["id"],
            name=j["name"],
            job_type=j["job_type"],
            state=j["state"],
            critical=j["critical"],
            pool=j["pool"],
            heavy=j["heavy"],
            deps=tuple((d["on"], d["hard"]) for d in j["deps"]),
            attempt_count=j["attempt_count"],
            max_attempts=j["max_attempts"],
            locked_by=j["locked_by"],
            next_run_at=j["next_run_at"],
            started_at=j["started_at"],
            finished_at=j["finished_at"],
            skip_reason=j["skip_reason"],
            last_error_code=j["last_error_code"],
            last_error_message=j["last_error_message"],
            datasets=tuple(j["datasets"]),
            attempts=tuple(attempts.get(j["id"], ())),
        )
        for j in await conn.fetch(_JOBS, run_id)
    ]
    return RunView(
        run=RunRow.from_row(run),
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
        jobs=tuple(dependency_order(jobs)),
    )


def dependency_order(jobs: list[JobView]) -> list[JobView]:
    """``jobs`` with every dependency before its dependents (stable otherwise)."""
    by_name = {job.name: job for job in jobs}
    placed: set[str] = set()
    ordered: list[JobView] = []

    def place(job: JobView) -> None:
        if job.name in placed:
            return
        placed.add(job.name)  # before recursing: a (corrupt) cycle cannot loop forever
        for dep, _ in job.deps:
            if dep in by_name:
                place(by_name[dep])
        ordered.append(job)

    for job in jobs:
        place(job)
    return ordered
