"""Every SQL statement of the streaming pipeline, by name.

The hot path uses a constant number of statements per batch, each set-based over ``unnest``
arrays or ``COPY``: ``LOOKUP`` (dedupe read), then one transaction of ``WRITE_BARRIER``,
``GENERATION_AND_IDS``, ``COPY`` of messages, dedupe keys, telemetry rows and
stage logs (``CLAIM_KEYS`` first on the careful path), and — only when the batch has them —
``INSERT_DUPLICATES`` and ``INSERT_DEAD_LETTERS``. The column orders of the ``COPY`` targets
are the tuples built by :mod:`stages.ingest.plan`.
"""

from __future__ import annotations

from stages.ingest.plan import (
    DEAD_LETTER_COLUMNS,
    DUPLICATE_COLUMNS,
    MESSAGE_COPY_COLUMNS,
    STAGE_PASS_COLUMNS,
    TELEMETRY_COLUMNS,
)

# Re-exported: the recorder takes the barrier through this module.
from streams.retention.sql import DEDUPE_BARRIER_KEY as DEDUPE_BARRIER_KEY

MESSAGES = "ingestion_messages"
STAGE_PASSES = "ingestion_stage_passes"
TELEMETRY = "device_telemetry_logs"

# -- registry lookups (cache misses only) ---------------------------------------------------

DEVICES = """
SELECT d.id, d.tenant_id, t.name AS tenant, d.external_id, d.active, d.schema_version_id
FROM unnest($1::text[], $2::text[]) AS k(tenant, device)
JOIN tenants t ON t.name = k.tenant
JOIN devices d ON d.tenant_id = t.id AND d.external_id = k.device
"""

SCHEMA_VERSIONS = """
SELECT v.id, v.spec, s.name AS schema, coalesce(
           (SELECT jsonb_object_agg(t.name, t.id) FROM schema_topics t
            WHERE t.schema_version_id = v.id), '{}'::jsonb) AS topic_ids
FROM device_schema_versions v JOIN device_schemas s ON s.id = v.schema_id
WHERE v.id = ANY($1::uuid[])
"""

# -- dedupe read: which keys (and which duplicate receipts) are already recorded ------------

# $1: key digests (stages.ingest.ingress.key_hash), newline-separated; $2: receipts
# "<stream seq>:<received_at µs>", newline-separated. (Two text parameters instead of arrays:
# encoding thousands of array elements one by one is the most expensive part of a batch for
# the client.) The first row is the dedupe generation current when the statement's snapshot
# was taken (id NULL): the recording transaction compares it with its own (recorder.py).
# A key is found through ``ingest_dedupe_keys`` (every generation not yet dropped: the dedupe
# horizon), and its owner's row by id and partition key; ``key`` is the owner's digest of it
# (migration 0020: the row keeps no text). Each key and receipt is a lookup of its own, an
# index probe (``LATERAL … LIMIT 1``: at most one row each, and a subquery with a LIMIT is
# not flattened into a join). Written as joins, the plan depended on statistics: a partition
# not yet analyzed (a new day's, or any where autovacuum does not run) made the planner
# expect every row to match the batch's keys and hash-join whole partitions, so the read grew
# with the tables (2.5 s for 500 keys at 2 million envelopes; bench/soak.py).
LOOKUP = """
SELECT NULL::uuid AS key, NULL::bigint AS id, NULL::bigint AS stream_seq,
       NULL::timestamptz AS received_at, NULL::text AS status,
       (SELECT max(gen) FROM ingest_dedupe_generations) AS gen
UNION ALL
SELECT m.source_deduplication_key, m.id, m.stream_seq, m.received_at, m.status::text, NULL
FROM unnest(string_to_array($1::text, E'\\n')::uuid[]) AS u(h)
CROSS JOIN LATERAL (SELECT k.message_id, k.received_at FROM ingest_dedupe_keys k
                    WHERE k.key_hash = u.h LIMIT 1) AS k
CROSS JOIN LATERAL (SELECT m.source_deduplication_key, m.id, m.stream_seq, m.received_at,
                           m.status
                    FROM ingestion_messages m
                    WHERE m.id = k.message_id AND m.received_at = k.received_at LIMIT 1) AS m
UNION ALL
SELECT NULL, d.id, d.stream_seq, d.received_at, d.status::text, NULL
FROM (SELECT split_part(r, ':', 1)::bigint AS seq,
             'epoch'::timestamptz + split_part(r, ':', 2)::bigint * interval '1 microsecond' AS rx
      FROM unnest(string_to_array($2::text, E'\\n')) AS r) AS r
CROSS JOIN LATERAL (SELECT d.id, d.stream_seq, d.received_at, d.status
                    FROM ingestion_messages d
                    WHERE d.stream_seq = r.seq AND d.received_at = r.rx
                      AND d.duplicate_of IS NOT NULL LIMIT 1) AS d
"""

# The id column's sequence, named as a constant: resolving it with
# ``pg_get_serial_sequence`` inside the query did a catalog lookup per id (six times the cost).
# ``tests/integration/ingest/test_sql.py`` checks the name against the catalog.
MESSAGE_ID_SEQUENCE = "ingestion_messages_id_seq"

RESERVE_IDS = f"""
SELECT ARRAY(SELECT nextval('{MESSAGE_ID_SEQUENCE}'::regclass) FROM generate_series(1, $1))
"""

# -- the recording transaction ---------------------------------------------------------------

# The writers' side of the dedupe generation barrier (migration 0012): every transaction that
# records keys holds this lock shared; the maintenance loop starts a generation holding it
# exclusively (streams.retention.maintain), so no transaction straddles a generation change.
# $1 is DEDUPE_BARRIER_KEY (defined with the maintenance statements, the other side). Then,
# in a statement of its own (its snapshot must be taken after the lock is held), the
# generation to write into.
WRITE_BARRIER = "SELECT pg_advisory_xact_lock_shared($1)"
CURRENT_GENERATION = "SELECT max(gen) FROM ingest_dedupe_generations"
# Both in one round trip, once the barrier is held: the generation and $1 reserved ids.
GENERATION_AND_IDS = f"""
SELECT ({CURRENT_GENERATION}) AS gen,
       ARRAY(SELECT nextval('{MESSAGE_ID_SEQUENCE}'::regclass) FROM generate_series(1, $1)) AS ids
"""

KEYS = "ingest_dedupe_keys"
KEY_COPY = ("key_hash", "gen", "message_id", "received_at")

# The careful path: claim each key in generation $2 unless another generation already holds
# it (those writers have all committed: the barrier) or a concurrent writer of this generation
# does (ON CONFLICT waits for it, then skips). Returns the message ids whose keys were claimed.
# The other generations are probed per key (a subquery with a LIMIT, not NOT EXISTS: that
# became an anti-join hashing every kept generation's keys, 0.85 s at 2 million; LOOKUP).
CLAIM_KEYS = """
INSERT INTO ingest_dedupe_keys (key_hash, gen, message_id, received_at)
SELECT u.h, $2, u.id, u.rx
FROM unnest($1::uuid[], $3::bigint[], $4::timestamptz[]) AS u(h, id, rx)
WHERE (SELECT 1 FROM ingest_dedupe_keys k WHERE k.key_hash = u.h AND k.gen <> $2 LIMIT 1)
      IS NULL
ON CONFLICT DO NOTHING
RETURNING message_id
"""

# A telemetry value layout's id (streams.ingest.layouts), registering the key list on first
# sight. DO UPDATE, not DO NOTHING: RETURNING must return the row a concurrent writer made.
REGISTER_LAYOUT = """
INSERT INTO telemetry_value_layouts (schema_version_id, topic, names)
VALUES ($1::text::uuid, $2, $3::text[])
ON CONFLICT (schema_version_id, topic, names) DO UPDATE SET names = EXCLUDED.names
RETURNING id
"""


# The id of a subject prefix (``"<namespace>."`` or ``""``; migration 0018), registered on
# first sight; DO UPDATE so that RETURNING returns a row a concurrent writer made.
REGISTER_SUBJECT_PREFIX = """
INSERT INTO ingest_subject_prefixes (prefix) VALUES ($1)
ON CONFLICT (prefix) DO UPDATE SET prefix = EXCLUDED.prefix
RETURNING id
"""


def _unnest(types: tuple[str, ...]) -> str:
    return ", ".join(f"${i}::{t}[]" for i, t in enumerate(types, start=1))


_DUPLICATE_TYPES = (
    "bigint", "bigint", "timestamptz", "text", "text", "int", "uuid", "uuid", "timestamptz",
    "bigint",
)
assert len(_DUPLICATE_TYPES) == len(DUPLICATE_COLUMNS)

INSERT_DUPLICATES = f"""
INSERT INTO ingestion_messages ({", ".join(DUPLICATE_COLUMNS)}, status)
SELECT *, 'duplicate' FROM unnest({_unnest(_DUPLICATE_TYPES)})
ON CONFLICT DO NOTHING
"""
# ON CONFLICT: the partial receipt index (it holds the partition key, received_at); a
# redelivered dedupe hit is recorded once.

_DEAD_LETTER_TYPES = ("bigint", "text", "text", "text", "bytea", "text", "text", "text", "uuid")
assert len(_DEAD_LETTER_TYPES) == len(DEAD_LETTER_COLUMNS)

# headers and failures arrive as JSON text (see plan.Recording.dead_letter_row). The failures
# of the envelope's earlier deliveries (nak'ed for redelivery, kept by key in
# ingest_delivery_failures) go in front of this delivery's, so the dead letter holds every
# failure, oldest first. The dead letter keeps the key's text (a redrive republishes under
# it; the message row holds only its digest since migration 0020) and the schema version
# (part of its error signature).
INSERT_DEAD_LETTERS = f"""
INSERT INTO dead_letters ({", ".join(DEAD_LETTER_COLUMNS)})
SELECT u.m, u.t, u.s, u.h::jsonb, u.p, u.r, coalesce((
           SELECT jsonb_agg(e.failure ORDER BY f.delivered, e.n)
           FROM ingest_delivery_failures f
           CROSS JOIN LATERAL jsonb_array_elements(f.failures) WITH ORDINALITY AS e(failure, n)
           WHERE f.key = u.k COLLATE "C"), '[]'::jsonb) || u.f::jsonb,
       u.k, u.v
FROM unnest({_unnest(_DEAD_LETTER_TYPES)}) AS u(m, t, s, h, p, r, f, k, v)
ON CONFLICT (ingestion_message_id) DO NOTHING
"""

# -- failed deliveries that earned a redelivery ----------------------------------------------

# $1 keys, $2 delivery numbers, $3 failures (JSON text). A delivery is noted once.
INSERT_DELIVERY_FAILURES = """
INSERT INTO ingest_delivery_failures (key, delivered, failures)
SELECT k, d, f::jsonb FROM unnest($1::text[], $2::int[], $3::text[]) AS u(k, d, f)
ON CONFLICT (key, delivered) DO NOTHING
"""

# The recording transaction consumes the notes of the envelopes it records (after their dead
# letters, if any, copied them).
DELETE_DELIVERY_FAILURES = """
DELETE FROM ingest_delivery_failures WHERE key = ANY($1::text[] COLLATE "C")
"""

MESSAGE_COPY = MESSAGE_COPY_COLUMNS
STAGE_PASS_COPY = STAGE_PASS_COLUMNS
TELEMETRY_COPY = TELEMETRY_COLUMNS

# -- dead letters: redrive and resolve (their reads: streams/views/dead_letters.py) ------------

# One page of a redrive, in id order after $2 (keyset paging: each page is its own
# transaction, and a dead letter that fails again stays open behind the cursor instead of
# coming round again). $1 NULL = every open dead letter that *can* be redriven (telemetry
# ``publish_failed``), so malformed envelopes ahead of them cannot use up the pages; named
# ids ($1) are all returned, so each gets an answer. SKIP LOCKED: a concurrent redrive has
# the locked ones.
REDRIVE_CANDIDATES = """
SELECT dl.id AS dead_letter_id, m.id AS message_id, m.attempts, m.status,
       dl.dedupe_key AS key, m.received_at, d.tenant_id, t.device_id,
       l.schema_version_id, l.topic, t.measured_at, t.seq,
       telemetry_values(t.values_layout, t.parameter_list) AS parameter_values,
       t.processing_state, d.external_id AS device, tn.name AS tenant
FROM dead_letters dl
JOIN ingestion_messages m ON m.id = dl.ingestion_message_id
LEFT JOIN device_telemetry_logs t
       ON t.ingestion_message_id = m.id AND t.received_at = m.received_at
      AND t.processing_state <> 'processed'
LEFT JOIN telemetry_value_layouts l ON l.id = t.values_layout
LEFT JOIN devices d ON d.id = t.device_id
LEFT JOIN tenants tn ON tn.id = d.tenant_id
WHERE dl.state = 'open' AND dl.id > $2
  AND CASE WHEN $1::bigint[] IS NULL THEN t.processing_state = 'publish_failed'
           ELSE dl.id = ANY($1::bigint[]) END
ORDER BY dl.id
LIMIT $3
FOR UPDATE OF dl SKIP LOCKED
"""

# The open dead letters a redrive of "all" does not reach (no publishable telemetry), by
# reason code: what is left for ``tideway dlq resolve``.
REDRIVE_UNREACHABLE = """
SELECT dl.reason_code, count(*) AS count
FROM dead_letters dl
LEFT JOIN device_telemetry_logs t ON t.ingestion_message_id = dl.ingestion_message_id
      AND t.processing_state <> 'processed'
WHERE dl.state = 'open' AND t.processing_state IS DISTINCT FROM 'publish_failed'
GROUP BY dl.reason_code
ORDER BY dl.reason_code
"""

# An operator closes dead letters that will never be redriven (``tideway dlq resolve``): by
# ids ($1), by reason code ($2), optionally one tenant ($3), with a note ($4), by whom ($5).
# Only open ones change; the envelope keeps its recorded status.
DEAD_LETTER_RESOLVE = """
UPDATE dead_letters SET state = 'resolved', resolution = 'operator', resolution_note = $4,
       resolved_by = $5, resolved_at = now()
WHERE state = 'open'
  AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
  AND ($2::text IS NULL OR reason_code = $2)
  AND ($3::text IS NULL OR tenant = $3)
RETURNING id, ingestion_message_id, tenant, reason_code
"""

REDRIVE_RESOLVE = """
WITH done AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[]) AS u(dl, msg, attempt)
), m AS (
    UPDATE ingestion_messages im SET status = 'completed', error_code = NULL,
           error_message = NULL, attempts = done.attempt, updated_at = now()
    FROM done WHERE im.id = done.msg AND im.status = 'failed_terminal'
    RETURNING im.id
), t AS (
    UPDATE device_telemetry_logs tl SET processing_state = 'processed', updated_at = now()
    FROM done WHERE tl.ingestion_message_id = done.msg AND tl.processing_state = 'publish_failed'
    RETURNING tl.ingestion_message_id
)
UPDATE dead_letters d SET state = 'resolved', resolution = 'redriven', resolved_at = now(),
       last_seen_at = now(), redrive_count = d.redrive_count + 1
FROM done WHERE d.id = done.dl
RETURNING d.id, (SELECT count(*) FROM m) AS messages, (SELECT count(*) FROM t) AS telemetry
"""

REDRIVE_FAILED = """
WITH failed AS (
    SELECT dl, msg, attempt, failure::jsonb AS failure
    FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[]) AS u(dl, msg, attempt, failure)
), m AS (
    UPDATE ingestion_messages im SET attempts = failed.attempt, updated_at = now()
    FROM failed WHERE im.id = failed.msg
    RETURNING im.id
)
UPDATE dead_letters d SET failures = d.failures || failed.failure, last_seen_at = now(),
       redrive_count = d.redrive_count + 1
FROM failed WHERE d.id = failed.dl
RETURNING d.id, (SELECT count(*) FROM m) AS messages
"""

# -- explaining one envelope -----------------------------------------------------------------

# ``full_subject``: the subject, spelled out where the row leaves it out (migration 0018);
# the tenant, device, schema version, topic, measurement time and seq of an envelope with a
# telemetry row are that row's (the ingestion_records view: migration 0020).
MESSAGE = """
SELECT m.*, d.external_id AS device, tn.name AS tenant,
       message_subject(m.subject, m.subject_prefix, m.tenant_id, m.device_id,
                       m.schema_topic_id) AS full_subject
FROM ingestion_records m
LEFT JOIN devices d ON d.id = m.device_id
LEFT JOIN tenants tn ON tn.id = m.tenant_id
WHERE m.id = $1
"""

# $1 the key's digest (stages.ingest.ingress.key_hash): found while its generation is kept.
MESSAGE_BY_KEY = "SELECT message_id FROM ingest_dedupe_keys WHERE key_hash = $1::uuid"

MESSAGE_STAGE_LOGS = """
SELECT attempt, stage, status, duration_us, error_code, error_message, input_snapshot,
       output_snapshot, created_at
FROM ingestion_stage_logs
WHERE message_id = $1 AND message_id_min <= $1 AND message_id_max >= $1
ORDER BY attempt, array_position(
    ARRAY['ingress', 'validate', 'mutate', 'derive', 'persist', 'publish'], stage)
"""

# What reprocesses replaced in the message's telemetry row (migration 0031), oldest first.
MESSAGE_CORRECTIONS = """
SELECT c.corrected_at, c.reprocess_id, pv.version AS previous_version,
       telemetry_values(c.previous_layout, c.previous_values) AS previous_values,
       nv.version AS version, telemetry_values(c.values_layout, c.parameter_list) AS "values"
FROM telemetry_corrections c
JOIN telemetry_value_layouts pl ON pl.id = c.previous_layout
JOIN telemetry_value_layouts nl ON nl.id = c.values_layout
LEFT JOIN device_schema_versions pv ON pv.id = pl.schema_version_id
LEFT JOIN device_schema_versions nv ON nv.id = nl.schema_version_id
WHERE c.ingestion_message_id = $1
ORDER BY c.id
"""

# The row as it reads (migration 0018 stores less): the tenant from the device, the schema
# version and topic from the values layout, the values with their keys, the creation time
# from the message.
MESSAGE_TELEMETRY = """
SELECT t.ingestion_message_id, d.tenant_id, t.device_id, l.schema_version_id, l.topic,
       t.measured_at, t.seq, t.received_at, t.processing_state,
       telemetry_values(t.values_layout, t.parameter_list) AS parameter_values,
       t.validation_issues, m.created_at, coalesce(t.updated_at, m.created_at) AS updated_at
FROM device_telemetry_logs t
JOIN telemetry_value_layouts l ON l.id = t.values_layout
LEFT JOIN devices d ON d.id = t.device_id
LEFT JOIN ingestion_messages m ON m.id = t.ingestion_message_id AND m.received_at = t.received_at
WHERE t.ingestion_message_id = $1 AND ($2::timestamptz IS NULL OR t.received_at = $2)
"""
# $2: the message's received_at when known (it picks the one partition whose BRIN index on
# the message id is read; migration 0020).

# The newest measurement of a device and topic that Postgres recorded as processed, in hot-state
# order (ts, then seq with none first; the earliest recorded of equals): what the hot state
# should hold once an envelope Postgres refused is taken back out of it.
NEWEST_PROCESSED = """
SELECT t.measured_at, t.seq, t.received_at,
       telemetry_values(t.values_layout, t.parameter_list)::text AS values_json,
       m.source_deduplication_key AS key
FROM device_telemetry_logs t
JOIN ingestion_messages m ON m.id = t.ingestion_message_id AND m.received_at = t.received_at
WHERE t.device_id = $1 AND t.processing_state = 'processed'
  AND t.values_layout IN (SELECT id FROM telemetry_value_layouts WHERE topic = $2)
ORDER BY t.measured_at DESC, t.seq DESC NULLS LAST, t.ingestion_message_id
LIMIT 1
"""

MESSAGE_DUPLICATES = """
SELECT id, stream_seq, received_at, created_at FROM ingestion_messages
WHERE duplicate_of = $1 ORDER BY id
"""

MESSAGE_DEAD_LETTER = "SELECT * FROM dead_letters WHERE ingestion_message_id = $1"
