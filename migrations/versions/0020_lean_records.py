"""lean records: nothing an envelope's telemetry row holds is stored again on its message row,
the dedupe key as its digest, telemetry found by message id through a BRIN index
(issue 14 item 5; docs/storage.md, "Bytes per envelope")

Theory of operation. An envelope that reaches the persist stage has two rows: its
``ingestion_messages`` row (kept ``retention.ingestion_records_s``, 30 days) and its
``device_telemetry_logs`` row (kept ``retention.telemetry_logs_s``, 90 days). Both carried the
device, the measurement time and ``seq``; the message also the tenant (the device's), the
schema version and the topic (the telemetry row's values layout names both). The row that
lives longer keeps them:

* ``ingestion_messages.tenant_id``, ``device_id``, ``schema_version_id``, ``schema_topic_id``,
  ``measured_at`` and ``seq`` are NULL on a message row that has a telemetry row (same id and
  ``received_at``); rows without one (duplicates, envelopes refused before persist) keep
  theirs. The ``ingestion_records`` view gives every message row with all of them filled in,
  as the table read before; one envelope's reads go through it.
* The console's ``(tenant_id, received_at)`` and ``(device_id, received_at)`` indexes become
  partial (``IS NOT NULL``): they hold only the message rows that keep their ids. The other
  envelopes are found through their telemetry rows: ``(device_id, measured_at)`` as before,
  and a BRIN index on ``received_at`` for a window of time.
* ``source_deduplication_key`` holds the key's digest (``uuid``: the first 128 bits of its
  SHA-256, the same digest ``ingest_dedupe_keys.key_hash`` holds) instead of its text: 16
  bytes instead of about 40. The text is still computed from every delivery; the rows that
  need it later keep it: ``dead_letters.dedupe_key`` (a redrive republishes under it) and
  ``ingest_delivery_failures``.
* ``status`` and ``processing_state`` are enum types (``ingestion_status``,
  ``telemetry_processing_state``): 4 bytes instead of the name's 8 to 18 as text. Readers are
  unchanged (a label compares with a string literal, asyncpg returns it as ``str``, COPY reads
  the name); the enum refuses an unknown value as the CHECK constraints it replaces did; the
  state-machine triggers are recreated as they were.
* ``device_telemetry_logs`` loses its primary key ``(ingestion_message_id, received_at)``:
  telemetry rows are written in id order by the transaction that creates their message's id,
  so a BRIN index on ``ingestion_message_id`` finds one (a lookup names ``received_at`` too,
  which picks the partition; ``autosummarize`` has autovacuum summarize each range once it
  is full, and the maintenance round summarizes the recent partitions' new ranges, so no
  reader scans an unsummarized tail); the rows a dead letter can name (every state but
  ``processed``) keep a B-tree on it for redrives. Nothing else writes telemetry rows, so
  the one-row-per-message rule is the recording transaction's, as the message id is.

Downgrade: the columns are filled in again from the telemetry rows, the types, primary key
and full indexes restored. A key's text cannot be computed back from its digest: rows whose
dead letter kept it get it back; the others get ``digest:<hex>`` (which this upgrade turns
back into the same digest, so down and up again loses nothing, and the dedupe keys stay
valid). The release before this migration matches a found key by its text: under it, an
envelope recorded since the upgrade and delivered again within the dedupe horizon is found
by its digest but not matched, and is nak'ed as contended until its key's generation is
dropped (it is never recorded twice: the dedupe key's primary key refuses that). Downgrade
soon after an upgrade, before much is redelivered or replayed.

Revision ID: 0020_lean_records
Revises: 0019_stage_pass_batches
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0020_lean_records"
down_revision = "0019_stage_pass_batches"
branch_labels = None
depends_on = None

# The digest of stages.ingest.ingress.key_hash, in SQL.
_DIGEST = "encode(substring(sha256(convert_to({}, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid"

# Columns a message row leaves to its telemetry row.
_CARRIED = ("tenant_id", "device_id", "schema_version_id", "schema_topic_id", "measured_at", "seq")

_HAS_TELEMETRY = """
EXISTS (SELECT 1 FROM device_telemetry_logs t
        WHERE t.ingestion_message_id = m.id AND t.received_at = m.received_at)
"""

VIEW = """
CREATE VIEW ingestion_records AS
SELECT m.id, m.source_deduplication_key, m.duplicate_of, m.stream_seq, m.received_at,
       m.subject, m.traceparent, m.payload_bytes,
       coalesce(m.tenant_id, d.tenant_id) AS tenant_id,
       coalesce(m.device_id, t.device_id) AS device_id,
       coalesce(m.schema_version_id, l.schema_version_id) AS schema_version_id,
       coalesce(m.schema_topic_id, st.id) AS schema_topic_id,
       coalesce(m.measured_at, t.measured_at) AS measured_at,
       coalesce(m.seq, t.seq) AS seq,
       m.status, m.error_code, m.error_message, m.attempts, m.created_at, m.updated_at,
       m.subject_prefix
FROM ingestion_messages m
LEFT JOIN device_telemetry_logs t
       ON m.device_id IS NULL AND t.ingestion_message_id = m.id AND t.received_at = m.received_at
LEFT JOIN telemetry_value_layouts l ON l.id = t.values_layout
LEFT JOIN devices d ON d.id = t.device_id
LEFT JOIN schema_topics st ON st.schema_version_id = l.schema_version_id AND st.name = l.topic
"""


_STATUSES = ("queued", "processing", "completed", "failed_validation", "inactive_skipped",
             "failed_terminal", "duplicate")
_STATES = ("processed", "invalid", "inactive_skipped", "publish_failed")
# (table, column, enum type, labels, CHECK constraint it replaces, its trigger)
_ENUMS = (
    ("ingestion_messages", "status", "ingestion_status", _STATUSES,
     "ck_ingestion_messages_status_known", "ingestion_messages_status_guard_update"),
    ("device_telemetry_logs", "processing_state", "telemetry_processing_state", _STATES,
     "ck_device_telemetry_logs_state_known", "device_telemetry_logs_processing_state_guard_update"),
)
_SHAPE = (
    "ALTER TABLE ingestion_messages ADD CONSTRAINT ck_ingestion_messages_duplicate_shape CHECK ("
    "(status = 'duplicate') = (duplicate_of IS NOT NULL) "
    "AND (status = 'duplicate') = (source_deduplication_key IS NULL))"
)


def _labels(labels: tuple[str, ...]) -> str:
    return ", ".join(f"'{label}'" for label in labels)


def _retype(enum: bool) -> None:
    """Status and processing state as enums (``enum``) or as text with CHECK constraints; the
    guard triggers and the duplicate-shape check name the columns, so they are dropped and
    made again around the change."""
    bind = op.get_bind()
    triggers = {
        name: bind.execute(text(
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t "
            "WHERE t.tgname = :name AND t.tgrelid = CAST(:table AS regclass)"),
            {"name": name, "table": table}).scalar_one()
        for table, _, _, _, _, name in _ENUMS
    }
    op.execute(
        "ALTER TABLE ingestion_messages DROP CONSTRAINT ck_ingestion_messages_duplicate_shape"
    )
    for table, column, type_, labels, check, trigger in _ENUMS:
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
        if enum:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {check}")
            op.execute(f"CREATE TYPE {type_} AS ENUM ({_labels(labels)})")
            op.execute(
                f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {type_} USING {column}::{type_}"
            )
        else:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE text USING {column}::text")
            op.execute(f"DROP TYPE {type_}")
            op.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT {check} "
                f"CHECK ({column} = ANY (ARRAY[{_labels(labels)}]))"
            )
        op.execute(triggers[trigger])
    op.execute(_SHAPE)


def upgrade() -> None:
    op.execute("ALTER TABLE dead_letters ADD COLUMN dedupe_key text")
    op.execute(
        """
        UPDATE dead_letters dl SET dedupe_key = m.source_deduplication_key
        FROM ingestion_messages m WHERE m.id = dl.ingestion_message_id
        """
    )
    op.execute(
        "ALTER TABLE ingestion_messages DROP CONSTRAINT ck_ingestion_messages_subject_known"
    )
    op.execute(
        "ALTER TABLE ingestion_messages ADD CONSTRAINT ck_ingestion_messages_subject_known "
        "CHECK (subject IS NOT NULL OR subject_prefix IS NOT NULL)"
    )
    nulls = ", ".join(f"{column} = NULL" for column in _CARRIED)
    op.execute(f"UPDATE ingestion_messages m SET {nulls} WHERE {_HAS_TELEMETRY}")
    # Rewrites every partition (and so reclaims what the NULLs freed).
    # A key a downgrade could not spell (``digest:<hex>``) gets its digest back unchanged,
    # also where an older upgrade (0012) made its dedupe key from that text.
    op.execute(
        f"""
        UPDATE ingest_dedupe_keys k
        SET key_hash = substring(m.source_deduplication_key FROM 8)::uuid
        FROM ingestion_messages m
        WHERE m.id = k.message_id AND m.received_at = k.received_at
          AND m.source_deduplication_key LIKE 'digest:%'
          AND k.key_hash = {_DIGEST.format('m.source_deduplication_key')}
        """
    )
    op.execute(
        "ALTER TABLE ingestion_messages ALTER COLUMN source_deduplication_key TYPE uuid "
        "USING CASE WHEN source_deduplication_key LIKE 'digest:%' "
        "THEN substring(source_deduplication_key FROM 8)::uuid "
        f"ELSE {_DIGEST.format('source_deduplication_key')} END"
    )
    _retype(enum=True)
    for column, name in (("tenant_id", "tenant"), ("device_id", "device")):
        op.execute(f"DROP INDEX ix_ingestion_messages_{name}_received")
        op.execute(
            f"CREATE INDEX ix_ingestion_messages_{name}_received ON ingestion_messages "
            f"({column}, received_at) WHERE {column} IS NOT NULL"
        )
    op.execute("ALTER TABLE device_telemetry_logs DROP CONSTRAINT pk_device_telemetry_logs")
    op.execute(
        "CREATE INDEX ix_device_telemetry_logs_message_id ON device_telemetry_logs "
        "USING brin (ingestion_message_id) WITH (pages_per_range = 16, autosummarize = on)"
    )
    op.execute(
        "CREATE INDEX ix_device_telemetry_logs_received ON device_telemetry_logs "
        "USING brin (received_at) WITH (pages_per_range = 16, autosummarize = on)"
    )
    op.execute(
        "CREATE INDEX ix_device_telemetry_logs_unprocessed ON device_telemetry_logs "
        "(ingestion_message_id, received_at) WHERE processing_state <> 'processed'"
    )
    op.execute(VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW ingestion_records")
    op.execute("DROP INDEX ix_device_telemetry_logs_unprocessed")
    op.execute("DROP INDEX ix_device_telemetry_logs_received")
    op.execute("DROP INDEX ix_device_telemetry_logs_message_id")
    _retype(enum=False)
    op.execute(
        "ALTER TABLE device_telemetry_logs ADD CONSTRAINT pk_device_telemetry_logs "
        "PRIMARY KEY (ingestion_message_id, received_at)"
    )
    op.execute(
        """
        UPDATE ingestion_messages m
        SET tenant_id = d.tenant_id, device_id = t.device_id,
            schema_version_id = l.schema_version_id, schema_topic_id = st.id,
            measured_at = t.measured_at, seq = t.seq
        FROM device_telemetry_logs t
        JOIN telemetry_value_layouts l ON l.id = t.values_layout
        JOIN devices d ON d.id = t.device_id
        LEFT JOIN schema_topics st
               ON st.schema_version_id = l.schema_version_id AND st.name = l.topic
        WHERE t.ingestion_message_id = m.id AND t.received_at = m.received_at
          AND m.device_id IS NULL
        """
    )
    op.execute(
        "ALTER TABLE ingestion_messages ALTER COLUMN source_deduplication_key "
        "TYPE text COLLATE \"C\" "
        "USING 'digest:' || replace(source_deduplication_key::text, '-', '')"
    )
    op.execute(
        """
        UPDATE ingestion_messages m SET source_deduplication_key = dl.dedupe_key
        FROM dead_letters dl
        WHERE dl.ingestion_message_id = m.id AND dl.dedupe_key IS NOT NULL
          AND m.source_deduplication_key IS NOT NULL
        """
    )
    for column, name in (("tenant_id", "tenant"), ("device_id", "device")):
        op.execute(f"DROP INDEX ix_ingestion_messages_{name}_received")
        op.execute(
            f"CREATE INDEX ix_ingestion_messages_{name}_received ON ingestion_messages "
            f"({column}, received_at)"
        )
    op.execute(
        "ALTER TABLE ingestion_messages DROP CONSTRAINT ck_ingestion_messages_subject_known"
    )
    op.execute(
        "ALTER TABLE ingestion_messages ADD CONSTRAINT ck_ingestion_messages_subject_known "
        "CHECK (subject IS NOT NULL OR (subject_prefix IS NOT NULL AND tenant_id IS NOT NULL "
        "AND device_id IS NOT NULL AND schema_topic_id IS NOT NULL))"
    )
    op.execute("ALTER TABLE dead_letters DROP COLUMN dedupe_key")
