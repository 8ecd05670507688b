"""A fleet's data quality over a recent window: the console's fleet page (``GET /v1/fleet``).

Theory of operation
-------------------
Every envelope received, duplicates included, has an ``ingestion_messages`` row with its
arrival (``received_at``) and status; what the device said (``measured_at``, ``seq``) and which
device said it are on one of two rows (migration ``0020_lean_records``):

- an envelope that reached the persist stage has a ``device_telemetry_logs`` row (same id and
  ``received_at``) holding its device, ``measured_at`` and ``seq``; its message row holds NULL
  there and no tenant (the tenant is the device's). Its status is its telemetry row's
  ``processing_state`` (:data:`STATUS_OF_STATE`, one to one: a redrive moves both);
- every other envelope of a known device - duplicates, envelopes refused before persist (an
  unknown topic, no schema version) - keeps them on its message row.

So each statement reads the two halves and adds them up (``UNION ALL``: an envelope is on
exactly one side), for one tenant and one bounded window (the last hour by default): the
telemetry rows of the tenant's devices through the BRIN index on telemetry ``received_at``,
the message rows through the partial ``(tenant_id, received_at)`` index, which holds only the
rows that keep their ids. Both tables are partitioned by ``received_at``, so the window also
picks the partitions read. Per device, in one statement:

- ``last_seen_at``: the latest arrival; ``envelopes``: received, duplicates not counted;
- ``invalid_share``: the share that failed validation or was malformed (:data:`MALFORMED`:
  too large, not JSON, breaking the envelope contract). A malformed envelope on a registered
  device's subject keeps that device and its tenant on its message row (it has no telemetry
  row), so it counts here and in the fleet's totals; it has no ``measured_at`` or ``seq``, so
  it weighs in no latency, skew or gap;
- ``duplicates``: redeliveries and re-sends recognised by their dedupe key;
- ``out_of_order``: envelopes whose ``seq`` is below the one that arrived before it. Arrival
  order is ``received_at`` then id: ``received_at`` is JetStream's store time, which rises
  with the stream's sequence in one stream, and the telemetry rows hold no ``stream_seq``
  (ids break the rare ties: a batch records its envelopes in stream order);
- ``seq_gaps``: ``seq`` numbers between the window's lowest and highest that never arrived -
  core NATS and MQTT publishes carry no storage guarantee, so this is how an operator learns of
  lost envelopes (a gap straddling the window's start is not seen);
- ``latency_p50_s``: the median of ``received_at - measured_at`` (transport latency);
- ``clock_skew_s``: the *smallest* ``received_at - measured_at``: a device with a right clock
  cannot beat the network, so a large value means its clock is behind and a negative one that
  it is ahead.

A device's newest envelopes (:func:`recent_messages`) are its newest telemetry rows by
``measured_at`` (the ``(device_id, measured_at)`` index) and its newest message rows that keep
their device (the partial ``(device_id, received_at)`` index), each side limited, merged by
arrival; the status and error of the rows kept are read from their message rows by primary
key. Newest measured is newest received unless envelopes arrive far out of measurement order
(see :func:`recent_messages`).

The latencies are ``date_part``, not ``extract``: since Postgres 14 ``extract`` answers
``numeric``, whose arithmetic made the statement about 15 % slower than ``double precision``
(10,000 devices, 60,000 envelopes). ``now`` is passed in (tests pin it). The sort column
comes from :data:`SORTS`, a fixed table, never from the request's text.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Final

from schemas.error_codes import ENVELOPE_INVALID, ENVELOPE_TOO_LARGE, ENVELOPE_UNPARSEABLE
from stages.ingest.processing_state import ProcessingState
from stages.ingest.status import Status

__all__ = [
    "MALFORMED",
    "SORTS",
    "STATUS_OF_STATE",
    "STATUS_OF_TELEMETRY",
    "device_quality",
    "fleet_totals",
    "recent_messages",
]

STATUS_OF_STATE: Final = {
    ProcessingState.PROCESSED: Status.COMPLETED,
    ProcessingState.INVALID: Status.FAILED_VALIDATION,
    ProcessingState.INACTIVE_SKIPPED: Status.INACTIVE_SKIPPED,
    ProcessingState.PUBLISH_FAILED: Status.FAILED_TERMINAL,
}
"""The message status of an envelope whose telemetry row is in a processing state."""
assert set(STATUS_OF_STATE) == set(ProcessingState)

STATUS_OF_TELEMETRY: Final = (
    "CASE t.processing_state "
    + " ".join(f"WHEN '{state}' THEN '{status}'" for state, status in STATUS_OF_STATE.items())
    + " END"
)
"""The status, as SQL, of the envelope whose telemetry row is ``t`` (every state is in the
table above)."""
_STATUS: Final = STATUS_OF_TELEMETRY

SORTS: Final = {
    "device": "d.external_id",
    "last_seen_at": "q.last_seen_at",
    "envelopes": "q.envelopes",
    "invalid_share": "q.invalid_share",
    "duplicates": "q.duplicates",
    "out_of_order": "q.out_of_order",
    "seq_gaps": "q.seq_gaps",
    "latency_p50_s": "q.latency_p50_s",
    "clock_skew_s": "abs(q.clock_skew_s)",
}

MALFORMED: Final = (ENVELOPE_TOO_LARGE, ENVELOPE_UNPARSEABLE, ENVELOPE_INVALID)
"""The codes of an envelope refused at ingress because its body cannot be read: counted as
invalid (``invalid_share``) with those that failed validation."""
_MALFORMED: Final = ", ".join(f"'{code}'" for code in MALFORMED)

# The window's envelopes of the tenant's devices ($1 tenant, $2 now, $3 window): telemetry
# rows by the devices' tenant (BRIN on received_at), then the message rows that keep their
# device (partial (tenant_id, received_at) index).
_ARRIVALS: Final = f"""
  SELECT t.device_id, t.ingestion_message_id AS id, t.received_at, t.measured_at, t.seq,
         t.processing_state = 'invalid' AS invalid, false AS duplicate
  FROM device_telemetry_logs t JOIN devices d ON d.id = t.device_id
  WHERE d.tenant_id = $1
    AND t.received_at > $2::timestamptz - $3::interval AND t.received_at <= $2
  UNION ALL
  SELECT m.device_id, m.id, m.received_at, m.measured_at, m.seq,
         m.status = 'failed_validation' OR m.error_code IN ({_MALFORMED}),
         m.status = 'duplicate'
  FROM ingestion_messages m
  WHERE m.tenant_id = $1 AND m.device_id IS NOT NULL
    AND m.received_at > $2::timestamptz - $3::interval AND m.received_at <= $2
"""

# $1 tenant, $2 now, $3 window, $4 search text or null, $5 limit.
_DEVICES: Final = f"""
WITH recent AS (
  SELECT device_id, invalid, duplicate, received_at, measured_at, seq,
         -- malformed envelopes carry no seq: in a partition of their own, so that one arriving
         -- between two envelopes never hides that the second came out of order
         seq < lag(seq) OVER (PARTITION BY device_id, duplicate, seq IS NULL
                              ORDER BY received_at, id) AS behind
  FROM ({_ARRIVALS}) a
), q AS (
  SELECT device_id,
         max(received_at) AS last_seen_at,
         count(*) FILTER (WHERE NOT duplicate) AS envelopes,
         count(*) FILTER (WHERE invalid)::float8
           / greatest(count(*) FILTER (WHERE NOT duplicate), 1) AS invalid_share,
         count(*) FILTER (WHERE duplicate) AS duplicates,
         count(*) FILTER (WHERE behind AND NOT duplicate) AS out_of_order,
         coalesce(max(seq) FILTER (WHERE NOT duplicate)
                  - min(seq) FILTER (WHERE NOT duplicate) + 1
                  - count(DISTINCT seq) FILTER (WHERE NOT duplicate), 0) AS seq_gaps,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY date_part('epoch', received_at - measured_at))
           FILTER (WHERE NOT duplicate) AS latency_p50_s,
         min(date_part('epoch', received_at - measured_at))
           FILTER (WHERE NOT duplicate)::float8 AS clock_skew_s
  FROM recent GROUP BY device_id
)
SELECT d.external_id AS device, q.last_seen_at, q.envelopes, q.invalid_share, q.duplicates,
       q.out_of_order, q.seq_gaps, q.latency_p50_s, q.clock_skew_s,
       count(*) OVER () AS matched
FROM q JOIN devices d ON d.id = q.device_id AND d.tenant_id = $1
WHERE $4::text IS NULL OR strpos(lower(d.external_id), lower($4::text)) > 0
ORDER BY {{sort}} {{direction}} NULLS LAST, d.external_id
LIMIT $5
"""

# $1 tenant, $2 now, $3 window; the tenant's dead letters by its name ($4). The telemetry rows
# are counted per state, then named by status (as text: the status column is an enum); the
# message rows that keep their tenant by status.
_TOTALS: Final = f"""
SELECT (SELECT coalesce(jsonb_object_agg(status, n), '{{}}')
        FROM (SELECT status, sum(n)::bigint AS n
              FROM (SELECT {_STATUS} AS status, n
                    FROM (SELECT t.processing_state, count(*) AS n
                          FROM device_telemetry_logs t JOIN devices d ON d.id = t.device_id
                          WHERE d.tenant_id = $1
                            AND t.received_at > $2::timestamptz - $3::interval
                            AND t.received_at <= $2
                          GROUP BY t.processing_state) t
                    UNION ALL
                    SELECT status::text, count(*) FROM ingestion_messages
                    WHERE tenant_id = $1 AND received_at > $2::timestamptz - $3::interval
                      AND received_at <= $2
                    GROUP BY status) u
              GROUP BY status) s) AS statuses,
       (SELECT count(*) FROM dead_letters WHERE tenant = $4 AND state = 'open') AS open_dead_letters
"""

# Telemetry candidates per envelope shown (see recent_messages).
_CANDIDATES: Final = 2

# $1 tenant, $2 device's external id, $3 limit. The device's newest telemetry rows by
# measured_at ((device_id, measured_at) index), $3 * _CANDIDATES of them, and its newest $3
# message rows that keep their device ((device_id, received_at) partial index, duplicates
# included), merged by arrival; then the status and error of the $3 kept from their message
# rows by primary key (a telemetry row whose message row retention dropped is left out, as
# before), and their topic (a telemetry row's from its values layout).
_RECENT: Final = f"""
WITH device AS (SELECT id FROM devices WHERE tenant_id = $1 AND external_id = $2),
newest AS (
  SELECT * FROM (
    (SELECT t.ingestion_message_id AS id, t.received_at, t.measured_at, t.seq,
            t.values_layout
     FROM device_telemetry_logs t
     WHERE t.device_id = (SELECT id FROM device)
     ORDER BY t.measured_at DESC
     LIMIT $3 * {_CANDIDATES})
    UNION ALL
    (SELECT m.id, m.received_at, m.measured_at, m.seq, NULL::integer
     FROM ingestion_messages m
     WHERE m.device_id = (SELECT id FROM device)
     ORDER BY m.received_at DESC
     LIMIT $3)
  ) u
  ORDER BY received_at DESC, id DESC
  LIMIT $3
)
SELECT n.id, n.received_at, n.measured_at, n.seq, m.status, m.error_code,
       coalesce(l.topic, split_part(m.subject, '.', -1), st.name) AS topic
FROM newest n
JOIN ingestion_messages m ON m.id = n.id AND m.received_at = n.received_at
LEFT JOIN telemetry_value_layouts l ON l.id = n.values_layout
LEFT JOIN schema_topics st ON st.id = m.schema_topic_id
ORDER BY n.received_at DESC, n.id DESC
"""


async def device_quality(
    conn: Any, tenant_id: uuid.UUID, *, now: dt.datetime, window: dt.timedelta,
    sort: str = "last_seen_at", descending: bool = True, search: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:  # fmt: skip
    """Each device's figures (see the module docstring), sorted, the first ``limit``; each row
    also carries ``matched``, how many devices matched ``search``."""
    statement = _DEVICES.format(sort=SORTS[sort], direction="DESC" if descending else "ASC")
    rows = await conn.fetch(statement, tenant_id, now, window, search or None, limit)
    return [dict(r) for r in rows]


async def fleet_totals(
    conn: Any, tenant_id: uuid.UUID, tenant: str, *, now: dt.datetime, window: dt.timedelta
) -> dict[str, Any]:
    """Envelopes per status over the window, and the tenant's open dead letters."""
    row = await conn.fetchrow(_TOTALS, tenant_id, now, window, tenant)
    return {"statuses": dict(row["statuses"]), "open_dead_letters": row["open_dead_letters"]}


async def recent_messages(
    conn: Any, tenant_id: uuid.UUID, device: str, *, limit: int
) -> list[dict[str, Any]]:
    """The device's newest envelopes (duplicates included), newest first.

    The telemetry side is read newest *measured* first, ``limit`` × :data:`_CANDIDATES`
    rows, so the answer is the newest by arrival unless an envelope arrived after more than
    ``limit`` envelopes measured later than it (a clock set back, a backlog uploaded late):
    such a one can be left out for older arrivals."""
    return [dict(r) for r in await conn.fetch(_RECENT, tenant_id, device, limit)]
