"""A tenant's ingest over a chosen range, in equal time buckets: envelopes per status and the
end-to-end latency (the console's fleet charts, ``GET /v1/fleet/history``).

Theory of operation
-------------------
The range (:data:`schemas.api.fleet_history.RANGE_SECONDS`) is cut into
:data:`~schemas.api.fleet_history.BUCKETS` equal buckets whose edges are multiples of the bucket
length since the epoch, so a chart refreshed every few seconds keeps its buckets; the last one
holds ``now``. The envelopes are read as the fleet page reads them
(:mod:`streams.views.data_quality`, migration ``0020_lean_records``): the telemetry rows of the
tenant's devices through the BRIN index on telemetry ``received_at`` (their status from their
processing state), and the message rows that keep their tenant (duplicates, envelopes refused
before persist, malformed envelopes of a registered device) through the partial
``(tenant_id, received_at)`` index - one scan of the range, materialized once.

- **Statuses**: every envelope of the range counted in its bucket.
- **End to end** is what :mod:`streams.views.latency` measures (JetStream storing the envelope
  to its message row's ``created_at``), over a sample: the newest :data:`PER_BUCKET` of each
  bucket, so a busy fleet's 24 hours cost at most ``BUCKETS × PER_BUCKET`` primary-key reads of
  message rows (a telemetry row's ``created_at`` is on its message row), not one per envelope.
  An envelope whose message row retention dropped has no end-to-end time and is not counted.

Bucket times are built here from the bucket's index, as aware UTC datetimes: the API answers
them with their offset, so a browser in any zone places them right.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Final

from schemas.api.fleet_history import BUCKETS, RANGE_SECONDS, FleetBucket, FleetHistory, FleetRange
from streams.views.data_quality import STATUS_OF_TELEMETRY

__all__ = ["PER_BUCKET", "fleet_history"]

PER_BUCKET: Final = 200
"""Envelopes per bucket the latency percentiles are read from (the bucket's newest)."""

# $1 tenant, $2 since (start of the first bucket), $3 now, $4 bucket length (s), $5 sample
# size per bucket. Bucket b holds received_at in [since + b * len, since + (b + 1) * len).
_HISTORY: Final = f"""
WITH a AS MATERIALIZED (
  SELECT floor(date_part('epoch', u.received_at - $2::timestamptz) / $4::float8)::int AS b, u.*
  FROM (
    SELECT t.received_at, t.ingestion_message_id AS id, {STATUS_OF_TELEMETRY} AS status,
           NULL::timestamptz AS created_at
    FROM device_telemetry_logs t JOIN devices d ON d.id = t.device_id
    WHERE d.tenant_id = $1 AND t.received_at >= $2 AND t.received_at <= $3
    UNION ALL
    SELECT m.received_at, m.id, m.status::text, m.created_at
    FROM ingestion_messages m
    WHERE m.tenant_id = $1 AND m.received_at >= $2 AND m.received_at <= $3
  ) u
), counts AS (
  SELECT b, jsonb_object_agg(status, n) AS statuses
  FROM (SELECT b, status, count(*) AS n FROM a GROUP BY b, status) s
  GROUP BY b
), sample AS (
  SELECT b, received_at, id, created_at
  FROM (SELECT b, received_at, id, created_at,
               row_number() OVER (PARTITION BY b ORDER BY received_at DESC, id DESC) AS r
        FROM a) s
  WHERE r <= $5
), latency AS (
  SELECT b, count(e2e) AS sampled,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e) AS p50,
         percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e) AS p99
  FROM (SELECT s.b,
               date_part('epoch', coalesce(s.created_at, m.created_at) - s.received_at) AS e2e
        FROM sample s
        LEFT JOIN LATERAL (SELECT m.created_at FROM ingestion_messages m
                           WHERE s.created_at IS NULL AND m.id = s.id
                             AND m.received_at = s.received_at
                           LIMIT 1) m ON true) e
  GROUP BY b
)
SELECT c.b, c.statuses, coalesce(l.sampled, 0) AS sampled, l.p50, l.p99
FROM counts c LEFT JOIN latency l USING (b)
ORDER BY c.b
"""


def buckets_of(range_: FleetRange, now: dt.datetime) -> tuple[dt.datetime, int]:
    """The start of the first bucket and the bucket length (s) of ``range_`` ending at ``now``:
    edges on multiples of the length since the epoch, the last bucket holding ``now``."""
    length = RANGE_SECONDS[range_] // BUCKETS
    epoch_s = int(now.timestamp())
    end = (epoch_s // length + 1) * length
    since = dt.datetime.fromtimestamp(end - length * BUCKETS, dt.UTC)
    return since, length


async def fleet_history(
    conn: Any, tenant_id: uuid.UUID, range_: FleetRange, *, now: dt.datetime
) -> FleetHistory:
    """The tenant's ingest over ``range_`` (see the module docstring), every bucket answered."""
    since, length = buckets_of(range_, now)
    rows = await conn.fetch(_HISTORY, tenant_id, since, now, float(length), PER_BUCKET)
    found = {r["b"]: r for r in rows}
    step = dt.timedelta(seconds=length)
    buckets = []
    for b in range(BUCKETS):
        row = found.get(b)
        buckets.append(FleetBucket(
            t=since + b * step,
            statuses=dict(row["statuses"]) if row else {},
            sampled=row["sampled"] if row else 0,
            end_to_end_p50_s=row["p50"] if row else None,
            end_to_end_p99_s=row["p99"] if row else None,
        ))  # fmt: skip
    return FleetHistory(at=now, range=range_, since=since, until=since + BUCKETS * step,
                        bucket_s=length, buckets=buckets)  # fmt: skip
