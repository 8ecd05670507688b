"""stage logs: one ``ingestion_stage_passes`` row per recording transaction, not per envelope
(issue 14 item 5; docs/storage.md, "Bytes per envelope")

Theory of operation. A row of ``ingestion_stage_passes`` held one processing pass (one
envelope, one attempt): 96 bytes per envelope, two thirds of it the row's header, its line
pointer, the message id, the time and the BRIN entry, paid again for every envelope of a batch
that the same transaction recorded at the same moment. A row now holds every pass of one
attempt number that one transaction recorded (the consumer's batch: hundreds of envelopes;
a redrive: the envelopes it published), as parallel arrays:

* ``message_ids`` (one per pass), with ``message_id_min`` / ``message_id_max`` for the BRIN
  index that finds a message's row;
* ``stages`` and ``failed``: per pass, the stages reached and those that failed, as bitmasks
  over the stages' order (bit 0 ingress ... bit 5 publish), as before;
* ``durations``: six slots per pass, one per stage in that order (µs; 0 for a stage not
  reached), so pass *i*'s stage *k* is element ``6 (i - 1) + k``;
* ``error_codes`` / ``error_messages``: six slots per pass like ``durations``, NULL when no
  pass of the row has an error (the common case);
* ``input_snapshots`` / ``output_snapshots``: JSON arrays of six slots per pass, only with
  ``capture_stage_snapshots`` (spec 001's switch);
* ``created_at``: the transaction's time, as every pass of the row had.

A batch's arrays go over Postgres's 2 kB TOAST threshold and are compressed (pglz): about 20
bytes per envelope for a batch of hundreds, against 96. The ``ingestion_stage_logs`` view
unnests them into the same rows and columns as before, plus ``message_id_min`` and
``message_id_max``: a reader of one message's logs bounds them too
(``message_id_min <= $1 AND message_id_max >= $1``), which the planner pushes into the BRIN
scan; without the bound it unnests every row.

Existing passes are regrouped into rows by (``created_at``, ``attempt``): the passes one
transaction wrote. The table is rebuilt with the same partitions (names and bounds); the
downgrade splits the rows back into one per pass.

Revision ID: 0019_stage_pass_batches
Revises: 0018_compact_rows
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0019_stage_pass_batches"
down_revision = "0018_compact_rows"
branch_labels = None
depends_on = None

_STAGES = "'ingress', 'validate', 'mutate', 'derive', 'persist', 'publish'"

_COLUMNS = """
    message_ids bigint[] NOT NULL,
    message_id_min bigint NOT NULL,
    message_id_max bigint NOT NULL,
    attempt smallint NOT NULL,
    stages smallint[] NOT NULL,
    failed smallint[] NOT NULL,
    durations integer[] NOT NULL,
    error_codes text[],
    error_messages text[],
    input_snapshots jsonb,
    output_snapshots jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_ingestion_stage_passes_aligned CHECK (
        cardinality(message_ids) >= 1
        AND cardinality(stages) = cardinality(message_ids)
        AND cardinality(failed) = cardinality(message_ids)
        AND cardinality(durations) = 6 * cardinality(message_ids)
        AND (error_codes IS NULL OR cardinality(error_codes) = 6 * cardinality(message_ids))
        AND (error_messages IS NULL
             OR cardinality(error_messages) = 6 * cardinality(message_ids))
        AND message_id_min <= message_id_max)"""

_VIEW = f"""
CREATE VIEW ingestion_stage_logs AS
SELECT x.message_id, p.attempt::integer AS attempt, s.stage,
       CASE WHEN p.failed[x.i] & s.bit <> 0 THEN 'failed' ELSE 'ok' END AS status,
       p.durations[6 * (x.i - 1) + s.k] AS duration_us,
       p.error_codes[6 * (x.i - 1) + s.k] AS error_code,
       p.error_messages[6 * (x.i - 1) + s.k] AS error_message,
       nullif(p.input_snapshots -> (6 * (x.i - 1) + s.k - 1)::integer, 'null'::jsonb)
           AS input_snapshot,
       nullif(p.output_snapshots -> (6 * (x.i - 1) + s.k - 1)::integer, 'null'::jsonb)
           AS output_snapshot,
       p.created_at, p.message_id_min, p.message_id_max
FROM ingestion_stage_passes p
CROSS JOIN LATERAL unnest(p.message_ids) WITH ORDINALITY AS x(message_id, i)
CROSS JOIN LATERAL (
    SELECT t.stage, t.bit, t.k::integer AS k
    FROM unnest(ARRAY[{_STAGES}], ARRAY[1, 2, 4, 8, 16, 32]) WITH ORDINALITY AS t(stage, bit, k)
    WHERE p.stages[x.i] & t.bit <> 0
) s
"""

# 0018's table and view, restored by the downgrade.
_COLUMNS_0018 = """
    message_id bigint NOT NULL,
    attempt smallint NOT NULL,
    stages smallint NOT NULL,
    failed smallint NOT NULL DEFAULT 0,
    durations bytea NOT NULL,
    error_codes text[],
    error_messages text[],
    input_snapshots jsonb,
    output_snapshots jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_ingestion_stage_passes_stages_known CHECK (
        stages BETWEEN 1 AND 63 AND failed & ~stages = 0),
    CONSTRAINT ck_ingestion_stage_passes_aligned CHECK (
        length(durations) = 4 * length(replace(stages::integer::bit(6)::text, '0', '')))"""

_VIEW_0018 = f"""
CREATE VIEW ingestion_stage_logs AS
SELECT p.message_id, p.attempt::integer AS attempt, s.stage,
       CASE WHEN p.failed & s.bit <> 0 THEN 'failed' ELSE 'ok' END AS status,
       ('x' || encode(substring(p.durations FROM 4 * s.n - 3 FOR 4), 'hex'))::bit(32)::integer
           AS duration_us, p.error_codes[s.n] AS error_code,
       p.error_messages[s.n] AS error_message,
       nullif(p.input_snapshots -> (s.n - 1), 'null'::jsonb) AS input_snapshot,
       nullif(p.output_snapshots -> (s.n - 1), 'null'::jsonb) AS output_snapshot,
       p.created_at
FROM ingestion_stage_passes p
CROSS JOIN LATERAL (
    SELECT t.stage, t.bit, (row_number() OVER (ORDER BY t.bit))::integer AS n
    FROM unnest(ARRAY[{_STAGES}], ARRAY[1, 2, 4, 8, 16, 32]) AS t(stage, bit)
    WHERE p.stages & t.bit <> 0
) s
"""

# One row per (pass, stage slot k) of 0018's rows: the stage's rank among those the pass
# reached (its position in 0018's per-pass arrays) gives its duration, errors and snapshots.
_SLOTS_0018 = """
CREATE TEMP TABLE stage_pass_slots ON COMMIT DROP AS
SELECT p.created_at, p.attempt, p.message_id, p.stages, p.failed, k.k,
       CASE WHEN r.reached THEN ('x' || encode(substring(p.durations FROM 4 * r.n - 3 FOR 4),
                                               'hex'))::bit(32)::integer ELSE 0 END AS duration,
       CASE WHEN r.reached THEN p.error_codes[r.n] END AS error_code,
       CASE WHEN r.reached THEN p.error_messages[r.n] END AS error_message,
       CASE WHEN r.reached THEN p.input_snapshots -> (r.n - 1) END AS input_snapshot,
       CASE WHEN r.reached THEN p.output_snapshots -> (r.n - 1) END AS output_snapshot,
       p.error_codes IS NOT NULL AS has_errors,
       p.input_snapshots IS NOT NULL OR p.output_snapshots IS NOT NULL AS has_snapshots
FROM ingestion_stage_passes p
CROSS JOIN generate_series(1, 6) AS k(k)
CROSS JOIN LATERAL (
    SELECT p.stages & (1 << (k.k - 1)) <> 0 AS reached,
           length(replace((p.stages & ((1 << k.k) - 1))::bit(6)::text, '0', '')) AS n
) r
"""

_GROUPED = """
CREATE TEMP TABLE stage_pass_rows ON COMMIT DROP AS
SELECT array_agg(message_id ORDER BY message_id) FILTER (WHERE k = 1) AS message_ids,
       min(message_id) AS message_id_min, max(message_id) AS message_id_max, attempt,
       array_agg(stages ORDER BY message_id) FILTER (WHERE k = 1) AS stages,
       array_agg(failed ORDER BY message_id) FILTER (WHERE k = 1) AS failed,
       array_agg(duration ORDER BY message_id, k) AS durations,
       CASE WHEN bool_or(has_errors)
            THEN array_agg(error_code ORDER BY message_id, k) END AS error_codes,
       CASE WHEN bool_or(has_errors)
            THEN array_agg(error_message ORDER BY message_id, k) END AS error_messages,
       CASE WHEN bool_or(has_snapshots)
            THEN jsonb_agg(coalesce(input_snapshot, 'null'::jsonb) ORDER BY message_id, k)
            END AS input_snapshots,
       CASE WHEN bool_or(has_snapshots)
            THEN jsonb_agg(coalesce(output_snapshot, 'null'::jsonb) ORDER BY message_id, k)
            END AS output_snapshots,
       created_at
FROM stage_pass_slots
GROUP BY created_at, attempt
"""

_SPLIT = """
CREATE TEMP TABLE stage_pass_rows ON COMMIT DROP AS
SELECT x.message_id, p.attempt, p.stages[x.i] AS stages, p.failed[x.i] AS failed,
       (SELECT string_agg(int4send(p.durations[6 * (x.i - 1) + k]), ''::bytea ORDER BY k)
        FROM generate_series(1, 6) AS k WHERE p.stages[x.i] & (1 << (k - 1)) <> 0) AS durations,
       CASE WHEN p.error_codes IS NOT NULL THEN ARRAY(
           SELECT p.error_codes[6 * (x.i - 1) + k] FROM generate_series(1, 6) AS k
           WHERE p.stages[x.i] & (1 << (k - 1)) <> 0 ORDER BY k) END AS error_codes,
       CASE WHEN p.error_messages IS NOT NULL THEN ARRAY(
           SELECT p.error_messages[6 * (x.i - 1) + k] FROM generate_series(1, 6) AS k
           WHERE p.stages[x.i] & (1 << (k - 1)) <> 0 ORDER BY k) END AS error_messages,
       CASE WHEN p.input_snapshots IS NOT NULL THEN (
           SELECT jsonb_agg(p.input_snapshots -> (6 * (x.i - 1) + k - 1)::integer ORDER BY k)
           FROM generate_series(1, 6) AS k WHERE p.stages[x.i] & (1 << (k - 1)) <> 0)
           END AS input_snapshots,
       CASE WHEN p.output_snapshots IS NOT NULL THEN (
           SELECT jsonb_agg(p.output_snapshots -> (6 * (x.i - 1) + k - 1)::integer ORDER BY k)
           FROM generate_series(1, 6) AS k WHERE p.stages[x.i] & (1 << (k - 1)) <> 0)
           END AS output_snapshots,
       p.created_at
FROM ingestion_stage_passes p
CROSS JOIN LATERAL unnest(p.message_ids) WITH ORDINALITY AS x(message_id, i)
"""

_PARTITIONS = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'ingestion_stage_passes'::regclass
ORDER BY c.relname
"""


def _rebuild(columns: str, index: str, view: str) -> None:
    """Replace the table by one of ``columns`` with the same partitions, fill it from the temp
    table ``stage_pass_rows`` and put the view back."""
    partitions = list(op.get_bind().execute(text(_PARTITIONS)))
    op.execute("DROP VIEW ingestion_stage_logs")
    op.execute("DROP TABLE ingestion_stage_passes")
    op.execute(f"CREATE TABLE ingestion_stage_passes ({columns}) PARTITION BY RANGE (created_at)")
    for name, bound in partitions:
        op.execute(f'CREATE TABLE "{name}" PARTITION OF ingestion_stage_passes {bound}')
    op.execute("INSERT INTO ingestion_stage_passes SELECT * FROM stage_pass_rows")
    op.execute(
        "CREATE INDEX ix_ingestion_stage_passes_message_id ON ingestion_stage_passes "
        f"USING brin ({index})"
    )
    op.execute(view)


def upgrade() -> None:
    op.execute(_SLOTS_0018)
    op.execute(_GROUPED)
    _rebuild(_COLUMNS, "message_id_min, message_id_max", _VIEW)


def downgrade() -> None:
    op.execute(_SPLIT)
    _rebuild(_COLUMNS_0018, "message_id", _VIEW_0018)
