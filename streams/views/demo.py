"""What ``tideway demo`` counts to show that every envelope is accounted for.

The demo's live view and its closing table read these: its tenant's envelopes by status,
telemetry rows, and the analytics rows ClickHouse holds.
"""

from __future__ import annotations

from typing import Any

from streams.clickhouse import ClickHouse

__all__ = ["analytics_rows", "status_counts", "telemetry_rows"]

# The demo tenant's envelopes, each counted once. A message row holds the tenant id only when
# the envelope has no telemetry row (migration 0020: a duplicate, one refused before persist);
# those of unknown devices (no tenant resolved) and any row that keeps its subject are found by
# subject. A row leaves its subject out only when its tenant, device and topic spell it
# (migration 0018): one with no tenant id either is found through its telemetry row, whose
# device names the tenant.
STATUS_COUNTS = """
WITH tenant AS (SELECT id FROM tenants WHERE name = $2)
SELECT status, count(*) AS n FROM (
  SELECT m.status FROM ingestion_messages m
  WHERE m.tenant_id = (SELECT id FROM tenant) OR m.subject LIKE $1
  UNION ALL
  SELECT m.status
  FROM device_telemetry_logs t
  JOIN devices d ON d.id = t.device_id
  JOIN ingestion_messages m ON m.id = t.ingestion_message_id AND m.received_at = t.received_at
  WHERE d.tenant_id = (SELECT id FROM tenant) AND m.subject IS NULL AND m.tenant_id IS NULL
) s
GROUP BY status ORDER BY status
"""
TELEMETRY_ROWS = "SELECT count(*) FROM device_telemetry_logs"


async def status_counts(conn: Any, subject_pattern: str, tenant: str) -> dict[str, int]:
    """The tenant's envelopes per status (those its subjects name, ``subject_pattern`` a
    LIKE pattern, included)."""
    rows = await conn.fetch(STATUS_COUNTS, subject_pattern, tenant)
    return {r["status"]: int(r["n"]) for r in rows}


async def telemetry_rows(conn: Any) -> int:
    """Rows in ``device_telemetry_logs``."""
    return int(await conn.fetchval(TELEMETRY_ROWS))


async def analytics_rows(clickhouse: ClickHouse, table: str) -> int:
    """Rows in the ClickHouse analytics ``table`` (after merging replaced versions)."""
    rows = await clickhouse.query_rows(f"SELECT count() FROM {clickhouse.database}.{table} FINAL")
    return int(rows[0][0])
