"""compact rows in the streaming tables (issue 14 item 5; docs/storage.md, "Bytes per envelope")

Theory of operation. Nothing spec 001 requires goes; what changes is how it is spelled:

* ``device_telemetry_logs.parameter_values`` (a JSON object, the keys repeated in every row:
  about 180 of a row's 330 bytes) becomes ``values_layout`` + ``parameter_list``: the values
  as a JSON array, in the order of the layout's key list. A *layout*
  (``telemetry_value_layouts``) is what every row of one schema version and topic with the
  same parameters present shares: the schema version, the topic and the ordered key list, so
  the row's ``schema_version_id`` and ``topic`` move into it too. A layout is registered once
  by the first writer that meets it and cached by every process; it never changes. JSON stays
  JSON (every value type, exactly as written): only the keys move out.
  ``telemetry_values(layout, list)`` rebuilds the object, spelled as the pipeline spelled it
  (compact, keys in order); readers select it under the old name, and the schema version and
  topic through the layout.
* ``device_telemetry_logs`` loses what it repeated: ``tenant_id`` (the device's tenant:
  ``devices.tenant_id`` never changes), ``schema_version_id`` and ``topic`` (the layout's,
  above) and ``created_at`` (the recording transaction's time,
  which ``ingestion_messages.created_at`` of the same id holds).
* ``ingestion_messages.subject`` (about 45 bytes) is NULL when it is exactly what the row's
  tenant, device and topic spell under the consuming deployment's namespace:
  ``<prefix>telemetry.<tenant>.<device>.<topic>``, the prefix (``"<namespace>."``, or ``""``)
  kept once in ``ingest_subject_prefixes`` and named by ``subject_prefix``.
  ``message_subject(subject, subject_prefix, tenant_id, device_id, schema_topic_id)`` gives
  the subject back. Rows that do not resolve (unknown device or topic, malformed subjects) and
  duplicate rows keep theirs.
* ``updated_at`` of both tables is NULL until something updates the row (a redrive): a NULL
  costs a bit in the null bitmap, a timestamp 8 bytes. ``coalesce(updated_at, created_at)``
  is the old value for messages.
* ``ingestion_stage_passes.durations_us`` (``integer[]``: 20 bytes of array header for six
  numbers) becomes ``durations``: the same numbers as 4-byte big-endian signed integers in a
  ``bytea``, one per stage reached, in the stages' order. The ``ingestion_stage_logs`` view
  decodes them (its rows and columns are unchanged).

Existing rows are rewritten in place (``UPDATE`` / ``ALTER``: the partitions stay as they are);
on a large deployment run it in a maintenance window, as 0012. The downgrade restores every
column from the compact form (``tenant_id`` from ``devices``; ``created_at`` of telemetry from
its message, or its ``received_at`` once the message is gone; ``updated_at`` from
``created_at`` where NULL).

Revision ID: 0018_compact_rows
Revises: 0017_dead_letter_signatures
"""

from __future__ import annotations

from alembic import op

revision = "0018_compact_rows"
down_revision = "0017_dead_letter_signatures"
branch_labels = None
depends_on = None

_STAGES = "'ingress', 'validate', 'mutate', 'derive', 'persist', 'publish'"

# The object a row's values spell: keys from the layout, values from the list, compact JSON
# (what orjson wrote before this revision). ``{}`` for an empty layout.
_VALUES_FUNCTION = """
CREATE FUNCTION telemetry_values(layout integer, list json) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(('{' || string_agg(to_json(k.name)::text || ':' || v.value::text, ','
                                       ORDER BY k.i) || '}')::json, '{}'::json)
    FROM telemetry_value_layouts l
    CROSS JOIN LATERAL unnest(l.names) WITH ORDINALITY AS k(name, i)
    JOIN json_array_elements(list) WITH ORDINALITY AS v(value, i) ON v.i = k.i
    WHERE l.id = layout
$$
"""

# One stage's duration: the 4 bytes at its rank in ``durations``, as a signed integer.
_DURATION = (
    "('x' || encode(substring(p.durations FROM 4 * s.n - 3 FOR 4), 'hex'))::bit(32)::integer"
)

_VIEW = (
    """
CREATE VIEW ingestion_stage_logs AS
SELECT p.message_id, p.attempt::integer AS attempt, s.stage,
       CASE WHEN p.failed & s.bit <> 0 THEN 'failed' ELSE 'ok' END AS status,
       """
    + _DURATION
    + """ AS duration_us, p.error_codes[s.n] AS error_code,
       p.error_messages[s.n] AS error_message,
       nullif(p.input_snapshots -> (s.n - 1), 'null'::jsonb) AS input_snapshot,
       nullif(p.output_snapshots -> (s.n - 1), 'null'::jsonb) AS output_snapshot,
       p.created_at
FROM ingestion_stage_passes p
CROSS JOIN LATERAL (
    SELECT t.stage, t.bit, (row_number() OVER (ORDER BY t.bit))::integer AS n
    FROM unnest(ARRAY["""
    + _STAGES
    + """], ARRAY[1, 2, 4, 8, 16, 32]) AS t(stage, bit)
    WHERE p.stages & t.bit <> 0
) s
"""
)
# 0012's view, restored by the downgrade.
_VIEW_0016 = _VIEW.replace(_DURATION, "p.durations_us[s.n]")

# $1 subject, $2 subject_prefix, $3 tenant_id, $4 device_id, $5 schema_topic_id (positional:
# ``prefix`` is also a column name).
_SUBJECT_FUNCTION = """
CREATE FUNCTION message_subject(text, smallint, uuid, uuid, uuid) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce($1, (
        SELECT p.prefix || 'telemetry.' || tn.name || '.' || d.external_id || '.' || st.name
        FROM ingest_subject_prefixes p, tenants tn, devices d, schema_topics st
        WHERE p.id = $2 AND tn.id = $3 AND d.id = $4 AND st.id = $5))
$$
"""

_STAGE_COUNT = "length(replace(stages::integer::bit(6)::text, '0', ''))"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE telemetry_value_layouts (
            id integer GENERATED BY DEFAULT AS IDENTITY,
            schema_version_id uuid NOT NULL,
            topic text NOT NULL,
            names text[] COLLATE "C" NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_telemetry_value_layouts PRIMARY KEY (id),
            CONSTRAINT uq_telemetry_value_layouts_schema_version_id
                UNIQUE (schema_version_id, topic, names)
        )
        """
    )
    op.execute(_VALUES_FUNCTION)
    op.execute(
        """
        CREATE TABLE ingest_subject_prefixes (
            id smallint GENERATED BY DEFAULT AS IDENTITY,
            prefix text COLLATE "C" NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_ingest_subject_prefixes PRIMARY KEY (id),
            CONSTRAINT uq_ingest_subject_prefixes_prefix UNIQUE (prefix)
        )
        """
    )
    op.execute(_SUBJECT_FUNCTION)
    # Existing rows keep their subjects (the migration does not know the namespace they were
    # consumed under); new rows leave out the ones their consumer can spell.
    op.execute("ALTER TABLE ingestion_messages ADD COLUMN subject_prefix smallint")
    op.execute("ALTER TABLE ingestion_messages ALTER COLUMN subject DROP NOT NULL")
    op.execute(
        "ALTER TABLE ingestion_messages ADD CONSTRAINT ck_ingestion_messages_subject_known "
        "CHECK (subject IS NOT NULL OR (subject_prefix IS NOT NULL AND tenant_id IS NOT NULL "
        "AND device_id IS NOT NULL AND schema_topic_id IS NOT NULL))"
    )

    # -- telemetry: values as layout + list; no tenant, no created_at; updated_at when updated
    # The keys of a ``json`` object come back in the order they were written.
    op.execute(
        """
        INSERT INTO telemetry_value_layouts (schema_version_id, topic, names)
        SELECT DISTINCT schema_version_id, topic,
               ARRAY(SELECT json_object_keys(parameter_values))::text[]
        FROM device_telemetry_logs
        ON CONFLICT DO NOTHING
        """
    )
    op.execute("ALTER TABLE device_telemetry_logs ADD COLUMN values_layout integer")
    op.execute("ALTER TABLE device_telemetry_logs ADD COLUMN parameter_list json")
    op.execute(
        """
        UPDATE device_telemetry_logs t
        SET values_layout = l.id,
            parameter_list = coalesce((SELECT ('[' || string_agg(e.value::text, ','
                                                ORDER BY e.i) || ']')::json
                                       FROM json_each(t.parameter_values)
                                            WITH ORDINALITY AS e(key, value, i)), '[]'::json)
        FROM telemetry_value_layouts l
        WHERE l.schema_version_id = t.schema_version_id AND l.topic = t.topic
          AND l.names = ARRAY(SELECT json_object_keys(t.parameter_values))::text[]
        """
    )
    op.execute("ALTER TABLE device_telemetry_logs ALTER COLUMN values_layout SET NOT NULL")
    op.execute("ALTER TABLE device_telemetry_logs ALTER COLUMN parameter_list SET NOT NULL")
    # The column order of the COPY on the hot path does not depend on the table's: it names
    # its columns (stages.ingest.plan.TELEMETRY_COLUMNS).
    for column in ("parameter_values", "tenant_id", "created_at", "schema_version_id", "topic"):
        op.execute(f"ALTER TABLE device_telemetry_logs DROP COLUMN {column}")
    for table in ("device_telemetry_logs", "ingestion_messages"):
        op.execute(f"ALTER TABLE {table} ALTER COLUMN updated_at DROP NOT NULL")
        op.execute(f"ALTER TABLE {table} ALTER COLUMN updated_at DROP DEFAULT")
    # A row never updated has no update time.
    op.execute("UPDATE ingestion_messages SET updated_at = NULL WHERE updated_at = created_at")
    op.execute(
        """
        UPDATE device_telemetry_logs t SET updated_at = NULL
        FROM ingestion_messages m
        WHERE m.id = t.ingestion_message_id AND m.received_at = t.received_at
          AND t.updated_at = m.created_at
        """
    )

    # -- stage passes: durations as packed 4-byte integers
    op.execute("DROP VIEW ingestion_stage_logs")
    op.execute(
        "ALTER TABLE ingestion_stage_passes DROP CONSTRAINT ck_ingestion_stage_passes_aligned"
    )
    op.execute("ALTER TABLE ingestion_stage_passes ADD COLUMN durations bytea")
    op.execute(
        """
        UPDATE ingestion_stage_passes p
        SET durations = (SELECT string_agg(int4send(d), ''::bytea ORDER BY i)
                         FROM unnest(p.durations_us) WITH ORDINALITY AS u(d, i))
        """
    )
    op.execute("ALTER TABLE ingestion_stage_passes ALTER COLUMN durations SET NOT NULL")
    op.execute("ALTER TABLE ingestion_stage_passes DROP COLUMN durations_us")
    op.execute(
        "ALTER TABLE ingestion_stage_passes ADD CONSTRAINT ck_ingestion_stage_passes_aligned "
        f"CHECK (length(durations) = 4 * {_STAGE_COUNT})"
    )
    op.execute(_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW ingestion_stage_logs")
    op.execute(
        "ALTER TABLE ingestion_stage_passes DROP CONSTRAINT ck_ingestion_stage_passes_aligned"
    )
    op.execute("ALTER TABLE ingestion_stage_passes ADD COLUMN durations_us integer[]")
    op.execute(
        """
        UPDATE ingestion_stage_passes p
        SET durations_us = ARRAY(
            SELECT ('x' || encode(substring(p.durations FROM 4 * i - 3 FOR 4), 'hex'))
                   ::bit(32)::integer
            FROM generate_series(1, length(p.durations) / 4) AS i ORDER BY i)
        """
    )
    op.execute("ALTER TABLE ingestion_stage_passes ALTER COLUMN durations_us SET NOT NULL")
    op.execute("ALTER TABLE ingestion_stage_passes DROP COLUMN durations")
    op.execute(
        "ALTER TABLE ingestion_stage_passes ADD CONSTRAINT ck_ingestion_stage_passes_aligned "
        f"CHECK (cardinality(durations_us) = {_STAGE_COUNT})"
    )
    op.execute(_VIEW_0016)

    op.execute(
        "UPDATE ingestion_messages SET updated_at = created_at WHERE updated_at IS NULL"
    )
    op.execute("ALTER TABLE device_telemetry_logs ADD COLUMN tenant_id uuid")
    op.execute(
        "ALTER TABLE device_telemetry_logs ADD COLUMN created_at timestamptz DEFAULT now()"
    )
    op.execute("ALTER TABLE device_telemetry_logs ADD COLUMN parameter_values json")
    op.execute("ALTER TABLE device_telemetry_logs ADD COLUMN schema_version_id uuid")
    op.execute("ALTER TABLE device_telemetry_logs ADD COLUMN topic text")
    op.execute(
        """
        UPDATE device_telemetry_logs t
        SET schema_version_id = l.schema_version_id, topic = l.topic
        FROM telemetry_value_layouts l WHERE l.id = t.values_layout
        """
    )
    op.execute(
        """
        UPDATE device_telemetry_logs t
        SET tenant_id = d.tenant_id,
            created_at = coalesce((SELECT m.created_at FROM ingestion_messages m
                                   WHERE m.id = t.ingestion_message_id
                                     AND m.received_at = t.received_at), t.received_at),
            parameter_values = telemetry_values(t.values_layout, t.parameter_list)
        FROM devices d WHERE d.id = t.device_id
        """
    )
    op.execute(
        "UPDATE device_telemetry_logs SET updated_at = created_at WHERE updated_at IS NULL"
    )
    for column in ("tenant_id", "created_at", "parameter_values", "schema_version_id", "topic"):
        op.execute(f"ALTER TABLE device_telemetry_logs ALTER COLUMN {column} SET NOT NULL")
    for table in ("device_telemetry_logs", "ingestion_messages"):
        op.execute(f"ALTER TABLE {table} ALTER COLUMN updated_at SET DEFAULT now()")
        op.execute(f"ALTER TABLE {table} ALTER COLUMN updated_at SET NOT NULL")
    op.execute("ALTER TABLE device_telemetry_logs DROP COLUMN values_layout")
    op.execute("ALTER TABLE device_telemetry_logs DROP COLUMN parameter_list")
    op.execute("DROP FUNCTION telemetry_values(integer, json)")
    op.execute(
        """
        UPDATE ingestion_messages
        SET subject = message_subject(subject, subject_prefix, tenant_id, device_id,
                                      schema_topic_id)
        WHERE subject IS NULL
        """
    )
    op.execute("ALTER TABLE ingestion_messages DROP CONSTRAINT ck_ingestion_messages_subject_known")
    op.execute("ALTER TABLE ingestion_messages ALTER COLUMN subject SET NOT NULL")
    op.execute("ALTER TABLE ingestion_messages DROP COLUMN subject_prefix")
    op.execute("DROP FUNCTION message_subject(text, smallint, uuid, uuid, uuid)")
    op.execute("DROP TABLE ingest_subject_prefixes")
    op.execute("DROP TABLE telemetry_value_layouts")
