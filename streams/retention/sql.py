"""Every statement of retention and partition maintenance, by name.

Conventions: table and partition names are never user input (they come from
:data:`streams.retention.plan.TIERS` and the catalogue) and are quoted with ``%I``-style
``quote_ident`` in Python (:func:`ident`) where DDL needs them spelled out.
"""

from __future__ import annotations

# The partitions of the given parents, with their bounds as Postgres spells them
# ("FOR VALUES FROM ('2026-11-24 00:00:00+00') TO (...)", "FOR VALUES FROM (3) TO (4)",
# "DEFAULT"), cast back by the caller, and their size with indexes and TOAST.
PARTITIONS = r"""
SELECT parent.relname AS parent, c.relname AS name,
       pg_get_expr(c.relpartbound, c.oid) AS bound,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                     'FROM \(''?([^'')]*)''?\) TO \(''?([^'')]*)''?\)')) AS bounds,
       pg_total_relation_size(c.oid) AS bytes
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class parent ON parent.oid = i.inhparent
WHERE parent.relname = ANY($1::text[])
  AND parent.relnamespace = current_schema()::regnamespace
ORDER BY parent.relname, c.relname
"""

# Tables left detached by a run that stopped between DETACH and DROP (streams.retention
# names them; nothing else creates "<parent>_p…" tables).
DETACHED = r"""
SELECT c.relname AS name
FROM pg_class c
WHERE c.relkind = 'r' AND NOT c.relispartition
  AND c.relnamespace = current_schema()::regnamespace
  AND c.relname ~ ('^(' || array_to_string($1::text[], '|') || ')_p[0-9_]+$')
"""

GENERATIONS = "SELECT gen, started_at FROM ingest_dedupe_generations ORDER BY gen"

# $1 retention (seconds) of resolved dead letters, $2 now.
RESOLVED_DEAD_LETTERS = """
SELECT count(*) AS rows, coalesce(sum(pg_column_size(d.*)), 0)::bigint AS bytes
FROM dead_letters d
WHERE state = 'resolved' AND resolved_at < $2::timestamptz - make_interval(secs => $1)
"""

DELETE_RESOLVED_DEAD_LETTERS = """
DELETE FROM dead_letters
WHERE state = 'resolved' AND resolved_at < $2::timestamptz - make_interval(secs => $1)
"""

OPEN_DEAD_LETTER_IDS = "SELECT ingestion_message_id FROM dead_letters WHERE state = 'open'"

# Leader election of the maintenance loop (one leader at a time across processes).
MAINTENANCE_LOCK_KEY = 0x7469_6465_6D61_696E  # "tidemain"
TRY_LEAD = "SELECT pg_try_advisory_lock($1)"
LEAD = "SELECT pg_advisory_lock($1)"
STOP_LEADING = "SELECT pg_advisory_unlock($1)"

# The dedupe generation barrier's advisory lock: recording transactions hold it shared
# (streams.ingest.sql.WRITE_BARRIER), starting a generation holds it exclusively.
DEDUPE_BARRIER_KEY = 0x7469_6465_6475_7065  # "tidedupe"

# Starting a dedupe generation: the exclusive side of the writers' barrier
# (streams.ingest.sql.WRITE_BARRIER); waits for every recording transaction in flight.
BARRIER_EXCLUSIVE = "SELECT pg_advisory_xact_lock($1)"
# started_at: no earlier than the moment the barrier was held (clock_timestamp, not the
# transaction's start), so no key of the previous generation is younger than it; $2 is the
# round's ``now`` (later only in tests that move the clock forward).
START_GENERATION = """
INSERT INTO ingest_dedupe_generations (gen, started_at)
VALUES ($1, greatest($2::timestamptz, clock_timestamp()))
"""
FORGET_GENERATION = "DELETE FROM ingest_dedupe_generations WHERE gen = $1"


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'

# The BRIN indexes of the partitions named ($1), and one's summary of its new page ranges
# (maintain.summarize_recent).
BRIN_INDEXES = """
SELECT i.indexrelid::regclass::text AS index
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam AND am.amname = 'brin'
WHERE i.indrelid IN (SELECT to_regclass(n) FROM unnest($1::text[]) AS n)
ORDER BY 1
"""
SUMMARIZE_BRIN = "SELECT brin_summarize_new_values($1::regclass)"
