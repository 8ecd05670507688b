"""A tenant's end-to-end ingest latency over a short recent window, from Postgres (the console's
fleet page, ``GET /v1/fleet/live``).

End to end here is what ``tideway_ingest_end_to_end_latency_seconds`` measures, read back from
the rows: from JetStream storing an envelope (``received_at`` is the stream's timestamp) to the
consumer recording its outcome (``created_at``: rows are inserted once, at the end of the batch,
just before the ack). The metric is per process and global; this is per tenant and survives a
restart. One statement through the ``(tenant_id, received_at)`` index, over the newest
:data:`SAMPLE` envelopes of the window at most: a busy fleet stores far more in five minutes
(10,000 devices at 1 Hz: 3 million), and sorting them all for a figure refreshed every 10 s
would cost more than the figure is worth; the newest ten thousand give the percentiles to well
within a percent.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Final

__all__ = ["SAMPLE", "end_to_end"]

SAMPLE: Final = 10_000

# $1 tenant, $2 now, $3 window, $4 sample size.
_END_TO_END: Final = """
SELECT count(*) AS envelopes,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY e2e) AS p95
FROM (SELECT extract(epoch FROM created_at - received_at)::float8 AS e2e
      FROM ingestion_messages
      WHERE tenant_id = $1 AND received_at > $2::timestamptz - $3::interval
        AND received_at <= $2
      ORDER BY received_at DESC
      LIMIT $4) m
"""


async def end_to_end(
    conn: Any, tenant_id: uuid.UUID, *, now: dt.datetime, window: dt.timedelta
) -> dict[str, Any]:
    """``envelopes`` read (the window's newest, at most :data:`SAMPLE`) and their latency's
    ``p50`` / ``p95`` in seconds (``None`` when there were none)."""
    row = await conn.fetchrow(_END_TO_END, tenant_id, now, window, SAMPLE)
    return {"envelopes": row["envelopes"], "p50": row["p50"], "p95": row["p95"]}
