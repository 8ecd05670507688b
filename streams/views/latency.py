"""A tenant's end-to-end ingest latency over a short recent window, from Postgres (the console's
fleet page, ``GET /v1/fleet/live``).

End to end here is what ``tideway_ingest_end_to_end_latency_seconds`` measures, read back from
the rows: from JetStream storing an envelope (``received_at`` is the stream's timestamp) to the
consumer recording its outcome (``ingestion_messages.created_at``: rows are inserted once, at
the end of the batch, just before the ack). The metric is per process and global; this is per
tenant and survives a restart.

It is read over the newest :data:`SAMPLE` envelopes of the window at most: a busy fleet stores
far more in five minutes (10,000 devices at 1 Hz: 3 million), and sorting them all for a figure
refreshed every 10 s would cost more than the figure is worth; the newest ten thousand give the
percentiles to well within a percent.

An envelope is found by its tenant on one of two rows (migration ``0020_lean_records``): the
telemetry row of one that reached the persist stage (its device's tenant; read through the
BRIN index on telemetry ``received_at``), else its message row (the partial
``(tenant_id, received_at)`` index). Neither index yields rows newest first, so the window is
read in :data:`SLICES`, newest first, each slice for what the ones before it left of the
:data:`SAMPLE` (``LIMIT`` the remainder: at 0 a slice is never scanned): a busy fleet reads
about the newest sixty-fourth of the window, a quiet one all of it. ``created_at`` of the
sampled telemetry rows is then read from their message rows by primary key
(``(id, received_at)``: one partition's index each).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Final

__all__ = ["SAMPLE", "SLICES", "end_to_end"]

SAMPLE: Final = 10_000

SLICES: Final = (1 / 64, 1 / 8, 1.0)
"""Where the slices end, back from ``now``, as fractions of the window (the last is all of
it): with 5 minutes, the newest 4.7 s, then back to 37.5 s, then the rest."""

# One slice s{k} ($1 tenant; received_at in (${lo}, ${hi}]): its newest {limit} envelopes,
# telemetry rows with the message's created_at still to read (NULL). {limit} is the sample
# size $2 less what the slices before it hold: at 0, the Limit node never starts its scan.
_SLICE: Final = """
s{k} AS MATERIALIZED (
  SELECT received_at, id, created_at FROM (
    SELECT t.received_at, t.ingestion_message_id AS id, NULL::timestamptz AS created_at
    FROM device_telemetry_logs t JOIN devices d ON d.id = t.device_id
    WHERE d.tenant_id = $1 AND t.received_at > ${lo} AND t.received_at <= ${hi}
    UNION ALL
    SELECT m.received_at, m.id, m.created_at
    FROM ingestion_messages m
    WHERE m.tenant_id = $1 AND m.received_at > ${lo} AND m.received_at <= ${hi}
  ) u
  ORDER BY received_at DESC
  LIMIT {limit}
)"""


def _statement() -> str:
    slices = []
    for k in range(len(SLICES)):
        before = "".join(f" - (SELECT count(*) FROM s{j})" for j in range(k))
        slices.append(_SLICE.format(k=k, lo=k + 4, hi=k + 3, limit=f"$2{before}"))
    union = " UNION ALL ".join(f"SELECT * FROM s{k}" for k in range(len(SLICES)))
    return f"""
WITH{",".join(slices)}
SELECT count(e2e) AS envelopes,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY e2e) AS p95
FROM (SELECT extract(epoch FROM coalesce(r.created_at, m.created_at) - r.received_at)::float8
             AS e2e
      FROM ({union} ORDER BY received_at DESC LIMIT $2) r
      LEFT JOIN LATERAL (SELECT m.created_at FROM ingestion_messages m
                         WHERE r.created_at IS NULL AND m.id = r.id
                           AND m.received_at = r.received_at
                         LIMIT 1) m ON true) e
"""


# $1 tenant, $2 sample size, $3 now, then the slices' far ends (oldest last). An envelope whose
# message row is gone (telemetry is kept longer) has no end-to-end time and is not counted.
_END_TO_END: Final = _statement()


async def end_to_end(
    conn: Any, tenant_id: uuid.UUID, *, now: dt.datetime, window: dt.timedelta
) -> dict[str, Any]:
    """``envelopes`` read (the window's newest, at most :data:`SAMPLE`) and their latency's
    ``p50`` / ``p95`` in seconds (``None`` when there were none)."""
    ends = [now - window * fraction for fraction in SLICES]
    row = await conn.fetchrow(_END_TO_END, tenant_id, SAMPLE, now, *ends)
    return {"envelopes": row["envelopes"], "p50": row["p50"], "p95": row["p95"]}
