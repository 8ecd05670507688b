"""Waiting for a processing run, with progress callbacks (CLI ``--wait``, demo, bench, tests).

The run is found by id, or - right after an upload, before intake has created it - by the
upload's artifact-set hash (the run's idempotency key). Progress is read from Postgres every
``poll_s``; ``on_progress`` is called whenever a job changes state and once at the end.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.adapters import postgres
from streams.config import Settings
from streams.errors import NotFoundError, TransientError
from streams.registry import tenant_id as lookup_tenant

__all__ = ["TERMINAL", "RunProgress", "wait_for_run"]

TERMINAL = frozenset({"succeeded", "partial", "failed", "cancelled"})

_PROGRESS = """
SELECT r.id, r.status, r.jobs_total, r.jobs_open, r.failure_reason, r.features_available,
       r.feature_reasons, r.summary,
       coalesce(jsonb_object_agg(j.name, j.state) FILTER (WHERE j.name IS NOT NULL), '{}')
           AS jobs,
       coalesce(jsonb_agg(jsonb_build_object(
                    'job', j.name, 'critical', j.critical, 'code', j.last_error_code,
                    'message', j.last_error_message) ORDER BY j.name)
                FILTER (WHERE j.state = 'failed'), '[]') AS errors,
       (SELECT p.output -> 'notes' FROM jobs p
        WHERE p.run_id = r.id AND p.job_type = 'parse_raw' AND p.state = 'succeeded'
        ORDER BY p.created_at DESC LIMIT 1) AS notes
FROM processing_runs r LEFT JOIN jobs j ON j.run_id = r.id
WHERE r.id = $1 GROUP BY r.id
"""


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """A run's state at one moment."""

    run_id: uuid.UUID
    status: str
    jobs_total: int
    jobs_open: int
    jobs: Mapping[str, str] = field(default_factory=dict)
    failure_reason: str | None = None
    features_available: Mapping[str, bool] = field(default_factory=dict)
    feature_reasons: Mapping[str, str] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    errors: tuple[Mapping[str, Any], ...] = ()
    """Failed jobs: ``job``, ``critical``, ``code`` (the stage's own error code, such as
    ``NO_SESSION_DATE``) and ``message``."""
    notes: tuple[str, ...] = ()
    """What ``parse_raw`` says a user should know (a file read up to a cut...)."""

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    @property
    def jobs_done(self) -> int:
        return self.jobs_total - self.jobs_open


async def wait_for_run(
    settings: Settings,
    *,
    run_id: uuid.UUID | None = None,
    tenant: str | None = None,
    artifact_set_hash: str | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    poll_s: float = 0.2,
    timeout_s: float | None = None,
) -> RunProgress:
    """Wait until the run ends; returns its final progress (raises on ``timeout_s``)."""
    started = time.monotonic()
    conn = await postgres.connect(settings.postgres())
    try:
        if run_id is None:
            if tenant is None or artifact_set_hash is None:
                raise ValueError("give run_id, or tenant and artifact_set_hash")
            run_id = await _resolve(conn, tenant, artifact_set_hash, started, timeout_s, poll_s)
        last: dict[str, str] | None = None
        while True:
            row = await conn.fetchrow(_PROGRESS, run_id)
            if row is None:
                raise NotFoundError(f"no run {run_id}")
            progress = _progress(row, time.monotonic() - started)
            if on_progress is not None and (progress.jobs != last or progress.finished):
                on_progress(progress)
            last = dict(progress.jobs)
            if progress.finished:
                return progress
            _check_deadline(started, timeout_s, f"run {run_id} is still {progress.status}")
            await asyncio.sleep(poll_s)
    finally:
        await conn.close()


async def _resolve(
    conn: Any, tenant: str, key: str, started: float, timeout_s: float | None, poll_s: float
) -> uuid.UUID:
    while True:
        tid = await lookup_tenant(conn, tenant)
        if tid is not None:
            found: uuid.UUID | None = await conn.fetchval(
                "SELECT id FROM processing_runs WHERE tenant_id = $1 AND idempotency_key = $2",
                tid,
                key,
            )
            if found is not None:
                return found
        _check_deadline(started, timeout_s, "intake has not created the run (is it running?)")
        await asyncio.sleep(poll_s)


def _check_deadline(started: float, timeout_s: float | None, what: str) -> None:
    if timeout_s is not None and time.monotonic() - started > timeout_s:
        raise TransientError(f"timed out after {timeout_s:g}s: {what}", code="WAIT_TIMEOUT")


def _progress(row: Any, elapsed: float) -> RunProgress:
    return RunProgress(
        run_id=row["id"],
        status=row["status"],
        jobs_total=row["jobs_total"],
        jobs_open=row["jobs_open"],
        jobs=dict(row["jobs"]),
        failure_reason=row["failure_reason"],
        features_available=dict(row["features_available"] or {}),  # as the reducer stored them
        feature_reasons=dict(row["feature_reasons"] or {}),
        summary=row["summary"] or {},
        elapsed_s=elapsed,
        errors=tuple(row["errors"] or ()),
        notes=tuple(str(n) for n in row["notes"] or ()),
    )
