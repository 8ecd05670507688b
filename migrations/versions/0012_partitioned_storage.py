"""streaming tables partitioned by time; dedupe keys in their own table with a horizon

Theory of operation (docs/storage.md has the operator's view):

* ``ingestion_messages`` and ``device_telemetry_logs`` become ``PARTITION BY RANGE
  (received_at)``, ``ingestion_stage_passes`` ``PARTITION BY RANGE (created_at)``: one
  partition per time bucket (a day unless ``retention.partition_grain_s`` says otherwise),
  created ahead of time by the maintenance loop (``streams.retention``), never on the hot path,
  and dropped whole when their retention has passed. Each table has a ``DEFAULT`` partition, so
  a row whose time no partition covers (a replay older than every partition, a clock far in the
  future, a deployment whose maintenance has not run yet) still lands somewhere.
* A unique index on a partitioned table must contain the partition key, so the old
  ``UNIQUE (source_deduplication_key)`` cannot survive. Keys move to ``ingest_dedupe_keys``:
  a 128-bit digest of the key (the first half of its SHA-256, held in a fixed-width ``uuid``),
  the owner's id and receipt time, ``PARTITION BY RANGE (gen)``. A *generation* is a period of
  writes (``ingest_dedupe_generations``, one row each); within one, ``PRIMARY KEY (key_hash,
  gen)`` settles races exactly as the old unique index did. Writers hold
  ``pg_advisory_xact_lock_shared`` while recording; the maintenance loop starts a generation
  under the exclusive lock, so every write of the previous generation has committed, and is
  visible, before the first write of the next one (``streams.ingest.recorder``). Dropping a
  generation's partition forgets its keys: that is the dedupe horizon, never shorter than the
  TELEMETRY stream's ``max_age`` (enforced by the settings).
* Stage passes get a tighter encoding: the stages reached and the stages failed are two
  ``smallint`` bitmasks instead of two text arrays (the ``ingestion_stage_logs`` view unnests
  them into the same rows and columns as before).
* ``dead_letters`` loses its foreign key to ``ingestion_messages`` (a key on ``id`` alone is not
  possible on a partitioned table). Retention keeps the rows of open dead letters instead: they
  are moved to the ``DEFAULT`` partition before their partition is dropped.

Existing rows are moved into the new layout (one partition per day that has rows; every key
into generation 1), and moved back on downgrade. The copy runs in the migration's transaction:
on a large deployment run it in a maintenance window (it holds ACCESS EXCLUSIVE on the tables).

Revision ID: 0012_partitioned_storage
Revises: 0011_tenant_quotas
"""

from __future__ import annotations

from alembic import op

revision = "0012_partitioned_storage"
down_revision = "0011_tenant_quotas"
branch_labels = None
depends_on = None

_STAGES = "'ingress', 'validate', 'mutate', 'derive', 'persist', 'publish'"
_STATUSES = (
    "'queued', 'processing', 'completed', 'failed_validation', 'inactive_skipped', "
    "'failed_terminal', 'duplicate'"
)
# Frozen copies of 0002's transition pairs (a migration is a snapshot).
_STATUS_MOVES = (
    "'queued>processing', 'queued>duplicate', 'processing>completed', "
    "'processing>failed_validation', 'processing>inactive_skipped', "
    "'processing>failed_terminal', 'failed_terminal>completed'"
)
_STATE_MOVES = "'processed>publish_failed', 'publish_failed>processed'"
# The newest revision whose layout the downgrade restores.
_OLD = "_0008"

_VIEW_0008 = """
CREATE VIEW ingestion_stage_logs AS
SELECT p.message_id, p.attempt, s.stage, s.status, s.duration_us, s.error_code,
       s.error_message,
       nullif(p.input_snapshots -> (s.n - 1)::int, 'null'::jsonb) AS input_snapshot,
       nullif(p.output_snapshots -> (s.n - 1)::int, 'null'::jsonb) AS output_snapshot,
       p.created_at
FROM ingestion_stage_passes p,
     unnest(p.stages, p.statuses, p.durations_us, p.error_codes, p.error_messages)
         WITH ORDINALITY AS s(stage, status, duration_us, error_code, error_message, n)
"""
# The stage logs of a pass, one row per stage reached, in the stages' order: a stage's place
# in the pass's arrays (durations, error codes and messages, snapshots) is its rank among the
# stages the bitmask says were reached.
_VIEW = (
    """
CREATE VIEW ingestion_stage_logs AS
SELECT p.message_id, p.attempt::integer AS attempt, s.stage,
       CASE WHEN p.failed & s.bit <> 0 THEN 'failed' ELSE 'ok' END AS status,
       p.durations_us[s.n] AS duration_us, p.error_codes[s.n] AS error_code,
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

_MESSAGE_COLUMNS = """
    id bigint NOT NULL DEFAULT nextval('ingestion_messages_id_seq'::regclass),
    source_deduplication_key text COLLATE "C",
    duplicate_of bigint,
    stream_seq bigint NOT NULL,
    received_at timestamptz NOT NULL,
    subject text NOT NULL,
    traceparent text,
    payload_bytes integer NOT NULL,
    tenant_id uuid,
    device_id uuid,
    schema_version_id uuid,
    schema_topic_id uuid,
    measured_at timestamptz,
    seq bigint,
    status text NOT NULL,
    error_code text,
    error_message text,
    attempts integer NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()"""
_MESSAGE_CHECKS = f"""
    CONSTRAINT ck_ingestion_messages_duplicate_shape CHECK (
        (status = 'duplicate') = (duplicate_of IS NOT NULL)
        AND (status = 'duplicate') = (source_deduplication_key IS NULL)),
    CONSTRAINT ck_ingestion_messages_status_known CHECK (status IN ({_STATUSES}))"""
_PASS_COLUMNS_0008 = """
    message_id bigint NOT NULL,
    attempt integer NOT NULL,
    stages text[] NOT NULL,
    statuses text[] NOT NULL,
    durations_us integer[] NOT NULL,
    error_codes text[],
    error_messages text[],
    input_snapshots jsonb,
    output_snapshots jsonb,
    created_at timestamptz NOT NULL DEFAULT now()"""
_PASS_CHECKS_0008 = f"""
    CONSTRAINT ck_ingestion_stage_passes_stages_known CHECK (stages <@ ARRAY[{_STAGES}]::text[]),
    CONSTRAINT ck_ingestion_stage_passes_statuses_known
        CHECK (statuses <@ ARRAY['ok', 'failed']::text[]),
    CONSTRAINT ck_ingestion_stage_passes_aligned CHECK (
        cardinality(stages) >= 1 AND cardinality(statuses) = cardinality(stages)
        AND cardinality(durations_us) = cardinality(stages))"""
# A pass's stages as two bitmasks over the stages' order (bit 0 ingress ... bit 5 publish):
# reached and failed. The text arrays they replace took about 170 of a pass's 274 bytes.
_PASS_COLUMNS = """
    message_id bigint NOT NULL,
    attempt smallint NOT NULL,
    stages smallint NOT NULL,
    failed smallint NOT NULL DEFAULT 0,
    durations_us integer[] NOT NULL,
    error_codes text[],
    error_messages text[],
    input_snapshots jsonb,
    output_snapshots jsonb,
    created_at timestamptz NOT NULL DEFAULT now()"""
_PASS_CHECKS = """
    CONSTRAINT ck_ingestion_stage_passes_stages_known CHECK (
        stages BETWEEN 1 AND 63 AND failed & ~stages = 0),
    CONSTRAINT ck_ingestion_stage_passes_aligned CHECK (
        cardinality(durations_us) = length(replace(stages::integer::bit(6)::text, '0', '')))"""
_BIT = "(1 << (t.i - 1)::integer)"
_STAGE_ORDER = f"unnest(ARRAY[{_STAGES}]) WITH ORDINALITY AS t(s, i)"
_TELEMETRY_COLUMNS = """
    ingestion_message_id bigint NOT NULL,
    tenant_id uuid NOT NULL,
    device_id uuid NOT NULL,
    schema_version_id uuid NOT NULL,
    topic text NOT NULL,
    measured_at timestamptz NOT NULL,
    seq bigint,
    received_at timestamptz NOT NULL,
    processing_state text NOT NULL,
    parameter_values json NOT NULL,
    validation_issues jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()"""
_TELEMETRY_CHECKS = """
    CONSTRAINT ck_device_telemetry_logs_state_known CHECK (processing_state IN
        ('processed', 'invalid', 'inactive_skipped', 'publish_failed'))"""

# The partitioned tables and the column each is partitioned by.
_PARTITIONED = (
    ("ingestion_messages", "received_at"),
    ("ingestion_stage_passes", "created_at"),
    ("device_telemetry_logs", "received_at"),
)


def _rename_indexes(table: str, suffix: str) -> None:
    """Give every index of ``table`` (and its constraints' indexes) a ``suffix``, so the new
    table can take the names."""
    op.execute(
        f"""
        DO $$
        DECLARE r record;
        BEGIN
            FOR r IN SELECT c.relname FROM pg_index i
                     JOIN pg_class c ON c.oid = i.indexrelid
                     WHERE i.indrelid = '{table}'::regclass
            LOOP
                EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, r.relname || '{suffix}');
            END LOOP;
        END $$
        """
    )


def _guards() -> None:
    # The 0002 guard functions survive the old tables; only the triggers are per table.
    op.execute(
        "CREATE TRIGGER ingestion_messages_status_guard_update BEFORE UPDATE OF status "
        "ON ingestion_messages FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status "
        f"AND (OLD.status || '>' || NEW.status) NOT IN ({_STATUS_MOVES})) "
        "EXECUTE FUNCTION ingestion_messages_status_guard()"
    )
    op.execute(
        "CREATE TRIGGER device_telemetry_logs_processing_state_guard_update BEFORE UPDATE OF "
        "processing_state ON device_telemetry_logs FOR EACH ROW WHEN "
        "(OLD.processing_state IS DISTINCT FROM NEW.processing_state AND "
        f"(OLD.processing_state || '>' || NEW.processing_state) NOT IN ({_STATE_MOVES})) "
        "EXECUTE FUNCTION device_telemetry_logs_processing_state_guard()"
    )


def _day_partitions(table: str, column: str) -> None:
    """One daily partition per day that has rows in ``<table>_0008``."""
    op.execute(
        f"""
        DO $$
        DECLARE d date;
        BEGIN
            FOR d IN SELECT DISTINCT ({column} AT TIME ZONE 'UTC')::date
                     FROM {table}{_OLD} ORDER BY 1
            LOOP
                EXECUTE format(
                    'CREATE TABLE %I PARTITION OF {table} FOR VALUES FROM (%L) TO (%L)',
                    '{table}_p' || to_char(d, 'YYYYMMDD'),
                    (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            END LOOP;
        END $$
        """
    )


def upgrade() -> None:
    op.execute("DROP VIEW ingestion_stage_logs")
    op.execute(
        "ALTER TABLE dead_letters DROP CONSTRAINT "
        "fk_dead_letters_ingestion_message_id_ingestion_messages"
    )
    for table, _ in _PARTITIONED:
        op.execute(f"ALTER TABLE {table} RENAME TO {table}{_OLD}")
        _rename_indexes(f"{table}{_OLD}", _OLD)
    op.execute("ALTER SEQUENCE ingestion_messages_id_seq RENAME TO ingestion_messages_id_seq_0008")
    op.execute("CREATE SEQUENCE ingestion_messages_id_seq AS bigint")

    op.execute(
        f"""
        CREATE TABLE ingestion_messages ({_MESSAGE_COLUMNS},{_MESSAGE_CHECKS},
            CONSTRAINT pk_ingestion_messages PRIMARY KEY (id, received_at)
        ) PARTITION BY RANGE (received_at)
        """
    )
    op.execute("ALTER SEQUENCE ingestion_messages_id_seq OWNED BY ingestion_messages.id")
    op.execute(
        "CREATE UNIQUE INDEX uq_ingestion_messages_duplicate_receipt ON ingestion_messages "
        "(stream_seq, received_at) WHERE duplicate_of IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX ix_ingestion_messages_duplicate_of ON ingestion_messages (duplicate_of) "
        "WHERE duplicate_of IS NOT NULL"
    )
    op.execute(
        f"CREATE TABLE ingestion_stage_passes ({_PASS_COLUMNS},{_PASS_CHECKS}) "
        "PARTITION BY RANGE (created_at)"
    )
    op.execute(
        "CREATE INDEX ix_ingestion_stage_passes_message_id ON ingestion_stage_passes "
        "USING brin (message_id)"
    )
    op.execute(
        f"""
        CREATE TABLE device_telemetry_logs ({_TELEMETRY_COLUMNS},{_TELEMETRY_CHECKS},
            CONSTRAINT pk_device_telemetry_logs PRIMARY KEY (ingestion_message_id, received_at)
        ) PARTITION BY RANGE (received_at)
        """
    )
    op.execute(
        "CREATE INDEX ix_device_telemetry_logs_device_measured ON device_telemetry_logs "
        "(device_id, measured_at)"
    )
    for table, column in _PARTITIONED:
        op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        _day_partitions(table, column)
    _guards()

    op.execute(
        """
        CREATE TABLE ingest_dedupe_generations (
            gen integer NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_ingest_dedupe_generations PRIMARY KEY (gen)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE ingest_dedupe_keys (
            key_hash uuid NOT NULL,
            gen integer NOT NULL,
            message_id bigint NOT NULL,
            received_at timestamptz NOT NULL,
            CONSTRAINT pk_ingest_dedupe_keys PRIMARY KEY (key_hash, gen)
        ) PARTITION BY RANGE (gen)
        """
    )
    op.execute("INSERT INTO ingest_dedupe_generations (gen) VALUES (1)")
    op.execute(
        "CREATE TABLE ingest_dedupe_keys_g1 PARTITION OF ingest_dedupe_keys "
        "FOR VALUES FROM (1) TO (2)"
    )

    # The rows, moved. Column lists are spelled out: the old tables' column order is whatever
    # their history left (added columns at the end), the new ones' is the one above.
    op.execute(
        """
        INSERT INTO ingestion_messages (id, source_deduplication_key, duplicate_of, stream_seq,
            received_at, subject, traceparent, payload_bytes, tenant_id, device_id,
            schema_version_id, schema_topic_id, measured_at, seq, status, error_code,
            error_message, attempts, created_at, updated_at)
        SELECT id, source_deduplication_key, duplicate_of, stream_seq, received_at, subject,
               traceparent, payload_bytes, tenant_id, device_id, schema_version_id,
               schema_topic_id, measured_at, seq, status, error_code, error_message, attempts,
               created_at, updated_at
        FROM ingestion_messages_0008
        """
    )
    op.execute(
        """
        INSERT INTO ingest_dedupe_keys (key_hash, gen, message_id, received_at)
        SELECT encode(substring(sha256(convert_to(source_deduplication_key, 'UTF8'))
                                FOR 16), 'hex')::uuid, 1, id, received_at
        FROM ingestion_messages_0008 WHERE source_deduplication_key IS NOT NULL
        """
    )
    # Every pass Tideway wrote lists its stages in the stages' order, so the arrays keep their
    # alignment with the bitmasks.
    op.execute(
        f"""
        INSERT INTO ingestion_stage_passes (message_id, attempt, stages, failed,
            durations_us, error_codes, error_messages, input_snapshots, output_snapshots,
            created_at)
        SELECT o.message_id, o.attempt,
               (SELECT sum({_BIT}) FROM {_STAGE_ORDER} WHERE t.s = ANY(o.stages)),
               coalesce((SELECT sum({_BIT}) FROM {_STAGE_ORDER}
                         WHERE t.s = ANY(o.stages)
                           AND o.statuses[array_position(o.stages, t.s)] = 'failed'), 0),
               o.durations_us, o.error_codes, o.error_messages, o.input_snapshots,
               o.output_snapshots, o.created_at
        FROM ingestion_stage_passes_0008 o
        """
    )
    op.execute(
        """
        INSERT INTO device_telemetry_logs (ingestion_message_id, tenant_id, device_id,
            schema_version_id, topic, measured_at, seq, received_at, processing_state,
            parameter_values, validation_issues, created_at, updated_at)
        SELECT ingestion_message_id, tenant_id, device_id, schema_version_id, topic,
               measured_at, seq, received_at, processing_state, parameter_values,
               validation_issues, created_at, updated_at
        FROM device_telemetry_logs_0008
        """
    )
    # Continue the ids where the old identity left off (ids reserved but never used included).
    op.execute(
        """
        SELECT setval('ingestion_messages_id_seq', last_value, is_called)
        FROM ingestion_messages_id_seq_0008
        """
    )
    for table, _ in _PARTITIONED:
        op.execute(f"DROP TABLE {table}{_OLD}")
    op.execute(_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW ingestion_stage_logs")
    for table, _ in _PARTITIONED:
        op.execute(f"ALTER TABLE {table} RENAME TO {table}_0012")
        _rename_indexes(f"{table}_0012", "_0012")
    op.execute("ALTER SEQUENCE ingestion_messages_id_seq RENAME TO ingestion_messages_id_seq_0012")

    op.execute(
        f"""
        CREATE TABLE ingestion_messages (
            {
            _MESSAGE_COLUMNS.replace(
                "DEFAULT nextval('ingestion_messages_id_seq'::regclass)",
                "GENERATED BY DEFAULT AS IDENTITY",
            )
        },{_MESSAGE_CHECKS},
            CONSTRAINT pk_ingestion_messages PRIMARY KEY (id),
            CONSTRAINT uq_ingestion_messages_source_deduplication_key
                UNIQUE (source_deduplication_key)
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_ingestion_messages_duplicate_receipt ON ingestion_messages "
        "(stream_seq, received_at) WHERE duplicate_of IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX ix_ingestion_messages_duplicate_of ON ingestion_messages (duplicate_of) "
        "WHERE duplicate_of IS NOT NULL"
    )
    op.execute(f"CREATE TABLE ingestion_stage_passes ({_PASS_COLUMNS_0008},{_PASS_CHECKS_0008})")
    op.execute(
        "CREATE INDEX ix_ingestion_stage_passes_message_id ON ingestion_stage_passes "
        "USING brin (message_id)"
    )
    op.execute(
        f"""
        CREATE TABLE device_telemetry_logs ({_TELEMETRY_COLUMNS},{_TELEMETRY_CHECKS},
            CONSTRAINT pk_device_telemetry_logs PRIMARY KEY (ingestion_message_id))
        """
    )
    op.execute(
        "CREATE INDEX ix_device_telemetry_logs_device_measured ON device_telemetry_logs "
        "(device_id, measured_at)"
    )
    _guards()
    # Columns by name: a later revision's downgrade may have re-added a column at the end
    # (0018 does: the telemetry's tenant_id, created_at, parameter_values, schema version
    # and topic).
    for table, columns in (("ingestion_messages", _MESSAGE_COLUMNS),
                           ("device_telemetry_logs", _TELEMETRY_COLUMNS)):
        names = ", ".join(line.split()[0] for line in columns.strip().rstrip(",").split(",\n"))
        op.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {table}_0012")
    op.execute(
        f"""
        INSERT INTO ingestion_stage_passes (message_id, attempt, stages, statuses,
            durations_us, error_codes, error_messages, input_snapshots, output_snapshots,
            created_at)
        SELECT p.message_id, p.attempt,
               ARRAY(SELECT t.s FROM {_STAGE_ORDER} WHERE p.stages & {_BIT} <> 0 ORDER BY t.i),
               ARRAY(SELECT CASE WHEN p.failed & {_BIT} <> 0 THEN 'failed' ELSE 'ok' END
                     FROM {_STAGE_ORDER} WHERE p.stages & {_BIT} <> 0 ORDER BY t.i),
               p.durations_us, p.error_codes, p.error_messages, p.input_snapshots,
               p.output_snapshots, p.created_at
        FROM ingestion_stage_passes_0012 p
        """
    )
    op.execute(
        """
        SELECT setval(pg_get_serial_sequence('ingestion_messages', 'id'), last_value, is_called)
        FROM ingestion_messages_id_seq_0012
        """
    )
    for table, _ in _PARTITIONED:
        op.execute(f"DROP TABLE {table}_0012")
    op.execute("DROP TABLE ingest_dedupe_keys")
    op.execute("DROP TABLE ingest_dedupe_generations")
    op.execute(
        "ALTER TABLE dead_letters ADD CONSTRAINT "
        "fk_dead_letters_ingestion_message_id_ingestion_messages FOREIGN KEY "
        "(ingestion_message_id) REFERENCES ingestion_messages (id) ON DELETE RESTRICT"
    )
    op.execute(_VIEW_0008)
