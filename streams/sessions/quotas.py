"""Per-tenant daily upload quotas and the priority ceiling (spec 000 §12).

Theory of operation
-------------------
An upload (CLI or HTTP, :class:`~streams.sessions.upload.StagedUpload`) *reserves* its files
and bytes against the tenant's quotas for the current UTC day before a single file reaches its
final key: one statement (:data:`_RESERVE`) adds them to ``tenant_daily_usage`` only if the
sums stay within both quotas, so concurrent uploads can never pass a quota together. A refused
reservation is :class:`QuotaExceededError` (``QUOTA_EXCEEDED``: HTTP 429, CLI exit 3) naming
the quota, and the staged files are dropped - nothing is stored. An upload that fails after
its reservation (the notice cannot be published) gives it back (:func:`release`).

The limits are the ``quotas`` settings, each overridden by the tenant's own column when set
(``tenants.daily_artifacts_quota``, ``daily_bytes_quota``, ``max_priority``). The priority
ceiling is what an API key may ask for (:func:`check_priority`).

The third limit of spec 000 §12, at most ``max_active_runs`` runs of a tenant started at once,
is enforced by the job claim (``streams.jobs.sql.CLAIM``): runs beyond it stay ``pending``,
their jobs queued.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from streams.config import QuotaSettings
from streams.errors import UsageError
from streams.registry import ensure_tenant

__all__ = ["QuotaExceededError", "Reservation", "check_priority", "release", "reserve"]

# $1 tenant, $2 artifacts, $3 bytes, $4 daily artifact quota, $5 daily byte quota (both the
# settings' defaults; the tenant's own columns win). A row comes back only when reserved.
_RESERVE = """
WITH lim AS (
    SELECT coalesce(t.daily_artifacts_quota, $4::int) AS artifacts,
           coalesce(t.daily_bytes_quota, $5::bigint) AS bytes
    FROM tenants t WHERE t.id = $1
)
INSERT INTO tenant_daily_usage AS u (tenant_id, day, artifacts, bytes)
SELECT $1, (now() AT TIME ZONE 'UTC')::date, $2::int, $3::bigint FROM lim
WHERE $2::int <= lim.artifacts AND $3::bigint <= lim.bytes
ON CONFLICT (tenant_id, day) DO UPDATE
SET artifacts = u.artifacts + excluded.artifacts, bytes = u.bytes + excluded.bytes
WHERE u.artifacts + excluded.artifacts <= (SELECT artifacts FROM lim)
  AND u.bytes + excluded.bytes <= (SELECT bytes FROM lim)
RETURNING u.day
"""

# Why a reservation was refused: today's use and the limits.
_USAGE = """
SELECT coalesce(u.artifacts, 0) AS used_artifacts, coalesce(u.bytes, 0) AS used_bytes,
       coalesce(t.daily_artifacts_quota, $2::int) AS artifacts,
       coalesce(t.daily_bytes_quota, $3::bigint) AS bytes
FROM tenants t
LEFT JOIN tenant_daily_usage u ON u.tenant_id = t.id AND u.day = (now() AT TIME ZONE 'UTC')::date
WHERE t.id = $1
"""

_RELEASE = """
UPDATE tenant_daily_usage
SET artifacts = greatest(artifacts - $3, 0), bytes = greatest(bytes - $4, 0)
WHERE tenant_id = $1 AND day = $2
"""

_MAX_PRIORITY = "SELECT coalesce(max_priority, $2::int) FROM tenants WHERE id = $1"


class QuotaExceededError(UsageError):
    """An upload would pass one of the tenant's daily quotas (``quota`` names which)."""

    code = "QUOTA_EXCEEDED"

    def __init__(self, message: str, *, quota: str) -> None:
        super().__init__(message)
        self.quota = quota


@dataclass(frozen=True, kw_only=True, slots=True)
class Reservation:
    """Files and bytes counted against ``tenant_id``'s quotas on ``day``."""

    tenant_id: uuid.UUID
    day: dt.date
    artifacts: int
    bytes: int


async def reserve(
    conn: Any, *, tenant: str, artifacts: int, size: int, limits: QuotaSettings
) -> Reservation:
    """Count ``artifacts`` files of ``size`` bytes in all against ``tenant``'s quotas for today,
    or raise :class:`QuotaExceededError` (and count nothing)."""
    tenant_id = await ensure_tenant(conn, tenant)
    day = await conn.fetchval(
        _RESERVE, tenant_id, artifacts, size, limits.daily_artifacts, limits.daily_bytes
    )
    if day is not None:
        return Reservation(tenant_id=tenant_id, day=day, artifacts=artifacts, bytes=size)
    row = await conn.fetchrow(_USAGE, tenant_id, limits.daily_artifacts, limits.daily_bytes)
    if row["used_artifacts"] + artifacts > row["artifacts"]:
        quota, used, limit, asked, unit = (
            "daily_artifacts",
            row["used_artifacts"],
            row["artifacts"],
            artifacts,
            "files",
        )
    else:
        quota, used, limit, asked, unit = (
            "daily_bytes",
            row["used_bytes"],
            row["bytes"],
            size,
            "bytes",
        )
    raise QuotaExceededError(
        f"quota {quota} of tenant {tenant} exceeded: {used:,} of {limit:,} {unit} used today "
        f"(UTC), this upload adds {asked:,}",
        quota=quota,
    )


async def release(conn: Any, reservation: Reservation) -> None:
    """Give back a reservation whose upload did not happen."""
    await conn.execute(
        _RELEASE, reservation.tenant_id, reservation.day, reservation.artifacts, reservation.bytes
    )


async def check_priority(
    conn: Any, *, tenant_id: uuid.UUID, priority: int, limits: QuotaSettings
) -> int:
    """``priority`` if the tenant may ask for it; ``UsageError`` ``PRIORITY_TOO_HIGH`` if it is
    above the tenant's maximum (``tenants.max_priority``, else ``quotas.max_priority``)."""
    ceiling = await conn.fetchval(_MAX_PRIORITY, tenant_id, limits.max_priority)
    ceiling = limits.max_priority if ceiling is None else int(ceiling)
    if priority > ceiling:
        raise UsageError(
            f"priority {priority} is above this tenant's maximum of {ceiling}",
            code="PRIORITY_TOO_HIGH",
        )
    return priority
