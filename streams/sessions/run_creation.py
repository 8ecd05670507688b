"""Recording an accepted upload: artifacts, session and the planned run, in one transaction.

Intake calls :func:`create_run` once the notice's artifacts are in the object store. Everything
is idempotent: artifact rows on ``(tenant, sha256)``, the session on its derived id, and the run
on its idempotency key - the artifact-set hash - through the engine's ``enqueue_run``. So the
same upload accepted twice (a redelivered notice, a second ``tideway sessions upload``) returns
the first run with ``created=False`` and writes nothing. The tenant's saved tracks are stamped
into the new run's config (:func:`streams.sessions.saved_tracks.stamp_saved_tracks`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.planner import plan_run
from stages.jobs.retry import DEFAULT_MAX_ATTEMPTS
from streams.jobs.enqueue import enqueue_run
from streams.names import Names
from streams.registry import ensure_device, ensure_tenant
from streams.sessions.notice import NoticeArtifact, artifact_id
from streams.sessions.saved_tracks import stamp_saved_tracks
from streams.sessions.versions import current_versions

__all__ = ["IntakeResult", "RunRequest", "create_run"]

_INSERT_SESSION = """
INSERT INTO sessions (id, tenant_id, device_id, title, metadata)
VALUES ($1, $2, $3, $4, $5::jsonb)
ON CONFLICT (id) DO NOTHING
"""

_INSERT_ARTIFACTS = """
INSERT INTO artifacts (id, tenant_id, session_id, sha256, bytes, filename, storage_url,
                       uploaded_by)
SELECT x.id, $1, $2, x.sha256, x.bytes, x.filename, x.storage_url, $3
FROM jsonb_to_recordset($4::jsonb)
     AS x(id uuid, sha256 text, bytes bigint, filename text, storage_url text)
ON CONFLICT (tenant_id, sha256) DO NOTHING
"""

# A new run's trace context ($2: the upload's traceparent). Only a run this upload created
# gets it: a repeated upload leaves the first run in the first upload's trace.
_SET_TRACEPARENT = "UPDATE processing_runs SET traceparent = $2 WHERE id = $1"

# The rows' ids (an artifact stored earlier by another session keeps its first id and name).
_ARTIFACT_IDS = """
SELECT sha256, id FROM artifacts WHERE tenant_id = $1 AND sha256 = ANY($2::text[])
"""


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """An accepted upload, ready to be recorded."""

    tenant: str
    device: str
    session_id: uuid.UUID
    artifact_set_hash: str
    artifacts: tuple[NoticeArtifact, ...]  # distinct, sorted by sha256
    storage_urls: Mapping[str, str]  # sha256 -> URL in the object store
    priority: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)
    requested_by: str = "system"
    title: str | None = None
    traceparent: str | None = None
    """The upload's W3C trace context, stored on a new run (its attempts join that trace)."""


@dataclass(frozen=True, kw_only=True)
class IntakeResult:
    """The session and run of an upload; ``created`` is ``False`` for a repeat."""

    session_id: uuid.UUID
    run_id: uuid.UUID
    created: bool


async def create_run(
    pool: Any, req: RunRequest, *, namespace: str = "", default_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> IntakeResult:
    """Record ``req`` (see the module docstring); one transaction, safe to repeat.

    ``default_attempts`` is ``Settings.retry.job_max_attempts``."""
    channel = Names(namespace=namespace).jobs_channel
    async with pool.acquire() as conn, conn.transaction():
        tenant_id = await ensure_tenant(conn, req.tenant)
        device_id = await ensure_device(conn, tenant_id, req.device)
        await conn.execute(
            _INSERT_SESSION,
            req.session_id,
            tenant_id,
            device_id,
            req.title,
            {"artifact_set_hash": req.artifact_set_hash},
        )
        rows = [
            {
                "id": str(artifact_id(req.tenant, a.sha256)),
                "sha256": a.sha256,
                "bytes": a.size,
                "filename": a.name,
                "storage_url": req.storage_urls[a.sha256],
            }
            for a in req.artifacts
        ]
        await conn.execute(_INSERT_ARTIFACTS, tenant_id, req.session_id, req.requested_by, rows)
        ids = dict(await conn.fetch(_ARTIFACT_IDS, tenant_id, [a.sha256 for a in req.artifacts]))
        config = await stamp_saved_tracks(conn, tenant_id, req.config)
        enqueued = await enqueue_run(
            conn,
            dag=DEFAULT_DAG,
            tenant_id=tenant_id,
            session_id=req.session_id,
            plan=plan_run(config, default_attempts=default_attempts),
            config=config,
            versions=current_versions(),
            artifact_ids=[ids[a.sha256] for a in req.artifacts],
            artifact_set_hash=req.artifact_set_hash,
            priority=req.priority,
            requested_by=req.requested_by,
            idempotency_key=req.artifact_set_hash,
            channel=channel,
        )
        if enqueued.created and req.traceparent is not None:
            await conn.execute(_SET_TRACEPARENT, enqueued.run_id, req.traceparent)
    return IntakeResult(session_id=req.session_id, run_id=enqueued.run_id, created=enqueued.created)
