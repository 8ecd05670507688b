"""The streaming half's tables: one record per received envelope, its stage logs (one row per
processing pass, unnested per stage by the ``ingestion_stage_logs`` view), the
telemetry it produced and the dead letters an operator can redrive or resolve.

Identity. Every JetStream message Tideway receives gets exactly one ``ingestion_messages``
row, identified by its *receipt* ``(stream_seq, received_at)`` — the stream sequence and the
time JetStream stored it, both stable across redeliveries and replays. The spec's
``source_deduplication_key`` is unique among the rows that own a key; a dedupe hit is recorded
as its own row with status ``duplicate``, no key, and ``duplicate_of`` pointing at the owner.

Speed. These are the hot-path tables (tens of thousands of rows per second), so every row is
written once, by one transaction per batch that already knows its final status; they carry no
foreign keys to the registry (registry rows are never deleted: devices are deactivated, schema
versions are immutable) and only the indexes their readers need.

The status and processing-state machines (``stages.ingest.status`` and
``stages.ingest.processing_state``) are enforced in SQL by ``BEFORE UPDATE`` triggers created
in migration ``0002_ingest``; enum types bound the vocabularies (migration 0020).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from schemas.tables.base import created_at, metadata

_TS = sa.DateTime(timezone=True)

STATUSES = (
    "queued",
    "processing",
    "completed",
    "failed_validation",
    "inactive_skipped",
    "failed_terminal",
    "duplicate",
)
PROCESSING_STATES = ("processed", "invalid", "inactive_skipped", "publish_failed")
STAGES = ("ingress", "validate", "mutate", "derive", "persist", "publish")
STAGE_STATUSES = ("ok", "failed")
DEAD_LETTER_STATES = ("open", "resolved")
# How a dead letter was resolved: a redrive that published it, or an operator who closed it.
DEAD_LETTER_RESOLUTIONS = ("redriven", "operator")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


ingestion_messages = sa.Table(
    "ingestion_messages",
    metadata,
    # From the sequence ``ingestion_messages_id_seq`` (an identity column is not possible on a
    # partitioned table before Postgres 17); unique on its own, but the primary key of a
    # partitioned table must hold the partition key.
    sa.Column(
        "id",
        sa.BigInteger,
        primary_key=True,
        server_default=sa.text("nextval('ingestion_messages_id_seq'::regclass)"),
    ),
    # Spec 001's dedupe key, as its digest (the first 128 bits of its SHA-256:
    # ``stages.ingest.ingress.key_hash``; migration 0020: 16 bytes instead of the text's ~40;
    # the text goes to the hot state, the analytics rows and the dead letter); NULL on the
    # rows that record a dedupe hit. Its uniqueness lives in ``ingest_dedupe_keys``
    # (migration 0012): a unique index here would have to include ``received_at``.
    sa.Column("source_deduplication_key", pg.UUID(as_uuid=True)),
    sa.Column("duplicate_of", sa.BigInteger),
    # The receipt: JetStream stream sequence + the time the stream stored the message.
    sa.Column("stream_seq", sa.BigInteger, nullable=False),
    sa.Column("received_at", _TS, nullable=False, primary_key=True),
    # NULL when it is what tenant, device and topic spell under the consumer's namespace
    # (``subject_prefix``, below; migration 0018): ``message_subject(subject, subject_prefix,
    # tenant_id, device_id, schema_topic_id)`` gives it back.
    sa.Column("subject", sa.Text),
    sa.Column("traceparent", sa.Text),
    sa.Column("payload_bytes", sa.Integer, nullable=False),
    # What the registry resolved the subject to (NULL when unknown), and what the device
    # said. All six are NULL on a row whose envelope has a telemetry row, which holds them
    # (migration 0020); the ``ingestion_records`` view fills them in.
    sa.Column("tenant_id", pg.UUID(as_uuid=True)),
    sa.Column("device_id", pg.UUID(as_uuid=True)),
    sa.Column("schema_version_id", pg.UUID(as_uuid=True)),
    sa.Column("schema_topic_id", pg.UUID(as_uuid=True)),
    sa.Column("measured_at", _TS),
    sa.Column("seq", sa.BigInteger),
    # An enum (migration 0020): 4 bytes, and it refuses an unknown status.
    sa.Column("status", pg.ENUM(*STATUSES, name="ingestion_status", create_type=False),
              nullable=False),
    sa.Column("error_code", sa.Text),
    sa.Column("error_message", sa.Text),
    # Processing passes: 1 when first recorded, +1 on every redrive.
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("1")),
    created_at(),
    # NULL until something updates the row (a redrive; migration 0018): 8 bytes saved on
    # every row that is never updated, which is nearly all of them.
    sa.Column("updated_at", _TS),
    sa.Column("subject_prefix", sa.SmallInteger),
    sa.CheckConstraint("subject IS NOT NULL OR subject_prefix IS NOT NULL",
                       name="subject_known"),
    sa.CheckConstraint(
        "(status = 'duplicate') = (duplicate_of IS NOT NULL)"
        " AND (status = 'duplicate') = (source_deduplication_key IS NULL)",
        name="duplicate_shape",
    ),
    # A row recording a dedupe hit has no key, so its receipt keeps a redelivery of that same
    # message from being recorded twice. Partial: the other rows are unique by key already.
    sa.Index(
        "uq_ingestion_messages_duplicate_receipt",
        "stream_seq",
        "received_at",
        unique=True,
        postgresql_where=sa.text("duplicate_of IS NOT NULL"),
    ),
    # The duplicates of a message (``tideway messages show``); partial, so only the rare
    # duplicate rows carry an entry and the ingest path pays nothing for the others.
    sa.Index(
        "ix_ingestion_messages_duplicate_of",
        "duplicate_of",
        postgresql_where=sa.text("duplicate_of IS NOT NULL"),
    ),
    # The console's fleet and device pages read a recent window by arrival (migration 0014);
    # partial since 0020: the rows that keep their ids (no telemetry row) are the only ones
    # with an entry, the others are found through their telemetry rows.
    sa.Index("ix_ingestion_messages_tenant_received", "tenant_id", "received_at",
             postgresql_where=sa.text("tenant_id IS NOT NULL")),
    sa.Index("ix_ingestion_messages_device_received", "device_id", "received_at",
             postgresql_where=sa.text("device_id IS NOT NULL")),
    # One partition per time bucket, plus DEFAULT (migration 0012, ``streams.retention``).
    postgresql_partition_by="RANGE (received_at)",
)

ingestion_stage_passes = sa.Table(
    "ingestion_stage_passes",
    metadata,
    # The stage logs of the processing passes one transaction recorded with one ``attempt``
    # (1 when consumed, higher for a dead-letter redrive), in one row (migration 0019): the
    # consumer's whole batch, so the row's header, its BRIN entry and its arrays' headers are
    # paid once and Postgres compresses the arrays. No primary key: rows are only ever
    # appended, by the transaction that records the passes, and found per message through the
    # BRIN index on the id bounds (message ids grow with time, so it stays tiny). The view
    # ``ingestion_stage_logs`` unnests them into one row per pass and stage reached — what
    # readers use; a reader of one message bounds ``message_id_min`` / ``message_id_max``
    # too, or the view unnests every row.
    sa.Column("message_ids", pg.ARRAY(sa.BigInteger), nullable=False),
    sa.Column("message_id_min", sa.BigInteger, nullable=False),
    sa.Column("message_id_max", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.SmallInteger, nullable=False),
    # Per pass, the stages reached and those that failed, as bitmasks over STAGES (bit 0
    # ingress ... bit 5 publish).
    sa.Column("stages", pg.ARRAY(sa.SmallInteger), nullable=False),
    sa.Column("failed", pg.ARRAY(sa.SmallInteger), nullable=False),
    # Six slots per pass, one per stage in STAGES order: pass i's stage k is element
    # 6 (i - 1) + k. Durations in µs (0 for a stage not reached).
    sa.Column("durations", pg.ARRAY(sa.Integer), nullable=False),
    # Six slots per pass like ``durations``; NULL when no pass of the row has an error.
    sa.Column("error_codes", pg.ARRAY(sa.Text)),
    sa.Column("error_messages", pg.ARRAY(sa.Text)),
    # JSON arrays of six slots per pass; only when capture_stage_snapshots is on (spec 001's
    # snapshot switch).
    sa.Column("input_snapshots", pg.JSONB),
    sa.Column("output_snapshots", pg.JSONB),
    created_at(),
    sa.CheckConstraint(
        "cardinality(message_ids) >= 1"
        " AND cardinality(stages) = cardinality(message_ids)"
        " AND cardinality(failed) = cardinality(message_ids)"
        " AND cardinality(durations) = 6 * cardinality(message_ids)"
        " AND (error_codes IS NULL OR cardinality(error_codes) = 6 * cardinality(message_ids))"
        " AND (error_messages IS NULL"
        " OR cardinality(error_messages) = 6 * cardinality(message_ids))"
        " AND message_id_min <= message_id_max",
        name="aligned",
    ),
    sa.Index("ix_ingestion_stage_passes_message_id", "message_id_min", "message_id_max",
             postgresql_using="brin"),
    # By the time the passes were recorded (a redrive's pass lands in the day it ran).
    postgresql_partition_by="RANGE (created_at)",
)

device_telemetry_logs = sa.Table(
    "device_telemetry_logs",
    metadata,
    # No primary key (migration 0020): the recording transaction writes a message's only
    # telemetry row, with the id it has just reserved; found by id through the BRIN index
    # (rows go in id order), or the B-tree of the rows a dead letter can name.
    sa.Column("ingestion_message_id", sa.BigInteger, nullable=False),
    # No tenant column: the device's (``devices.tenant_id`` never changes); the schema version
    # and topic are the values layout's (below; migration 0018).
    sa.Column("device_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("measured_at", _TS, nullable=False),
    sa.Column("seq", sa.BigInteger),
    sa.Column("received_at", _TS, nullable=False),
    sa.Column("processing_state",
              pg.ENUM(*PROCESSING_STATES, name="telemetry_processing_state", create_type=False),
              nullable=False),
    # Final values when processed / publish_failed; extracted values when invalid or
    # inactive_skipped (the stages that did not run produced nothing). Stored without their
    # keys (migration 0018): ``parameter_list`` is a JSON array of the values in the order of
    # the key list of the layout ``values_layout`` (which also names the row's schema version
    # and topic), and the SQL function
    # ``telemetry_values(values_layout, parameter_list)`` rebuilds the object. ``json``, not
    # ``jsonb``: an append-only log read back one message at a time, so the insert skips
    # building the binary form (migration 0005).
    sa.Column("validation_issues", pg.JSONB),
    # NULL until a redrive updates the row. No created_at: its message's (migration 0018).
    sa.Column("updated_at", _TS),
    sa.Column("values_layout", sa.Integer, nullable=False),
    sa.Column("parameter_list", pg.JSON, nullable=False),
    sa.Index("ix_device_telemetry_logs_device_measured", "device_id", "measured_at"),
    sa.Index("ix_device_telemetry_logs_message_id", "ingestion_message_id",
             postgresql_using="brin",
             postgresql_with={"pages_per_range": 16, "autosummarize": "on"}),
    sa.Index("ix_device_telemetry_logs_received", "received_at",
             postgresql_using="brin",
             postgresql_with={"pages_per_range": 16, "autosummarize": "on"}),
    sa.Index("ix_device_telemetry_logs_unprocessed", "ingestion_message_id", "received_at",
             postgresql_where=sa.text("processing_state <> 'processed'")),
    postgresql_partition_by="RANGE (received_at)",
)

telemetry_value_layouts = sa.Table(
    "telemetry_value_layouts",
    metadata,
    # What the telemetry rows of one schema version and topic with the same parameters
    # present share (migration 0018): a row stores its values as a JSON array and the id of its
    # layout here. A few rows per schema version and topic ever, registered by the first
    # writer that meets one (``streams.ingest.layouts``) and never changed, so every process
    # caches them for good.
    sa.Column("id", sa.Integer, sa.Identity(always=False), primary_key=True),
    sa.Column("schema_version_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("topic", sa.Text, nullable=False),
    # The values' keys, in the order of the row's list.
    sa.Column("names", pg.ARRAY(sa.Text(collation="C")), nullable=False),
    created_at(),
    sa.UniqueConstraint("schema_version_id", "topic", "names"),
)

ingest_subject_prefixes = sa.Table(
    "ingest_subject_prefixes",
    metadata,
    # The subject prefixes (``"<namespace>."``, or ``""``) of the deployments that consume into
    # this database (migration 0018): a message whose subject its tenant, device and topic
    # spell stores only the prefix's id. One row per namespace ever; cached by every process.
    sa.Column("id", sa.SmallInteger, sa.Identity(always=False), primary_key=True),
    sa.Column("prefix", sa.Text(collation="C"), nullable=False, unique=True),
    created_at(),
)

dead_letters = sa.Table(
    "dead_letters",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
    # No foreign key: ``ingestion_messages`` is partitioned, and a key on ``id`` alone cannot
    # reference it. Retention keeps the message rows of open dead letters (it moves them to
    # the DEFAULT partition before dropping theirs; ``streams.retention``).
    sa.Column("ingestion_message_id", sa.BigInteger, nullable=False, unique=True),
    sa.Column("tenant", sa.Text),
    sa.Column("subject", sa.Text, nullable=False),
    # The original envelope exactly as received: body and transport headers.
    sa.Column("headers", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("reason_code", sa.Text, nullable=False),
    # Every failure, oldest first: [{"at", "stage", "code", "message", "attempt"}].
    sa.Column("failures", pg.JSONB, nullable=False),
    sa.Column("redrive_count", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("state", sa.Text, nullable=False, server_default=sa.text("'open'")),
    sa.Column("first_seen_at", _TS, nullable=False, server_default=sa.func.now()),
    sa.Column("last_seen_at", _TS, nullable=False, server_default=sa.func.now()),
    sa.Column("resolved_at", _TS),
    # Set when resolved (migration 0007): ``redriven`` or ``operator`` (``tideway dlq resolve``,
    # with the operator's note).
    sa.Column("resolution", sa.Text),
    sa.Column("resolution_note", sa.Text),
    # Who resolved it (migration 0026): the API key or the CLI's user; NULL when a redrive did.
    sa.Column("resolved_by", sa.Text),
    # The error signature the console groups dead letters by (migration 0016): the reason code,
    # the stage that failed first (kept right by Postgres whatever writes ``failures``) and the
    # schema version the envelope met (copied from its row when the dead letter is written).
    sa.Column("failed_stage", sa.Text, sa.Computed("(failures -> 0) ->> 'stage'", persisted=True)),
    sa.Column("schema_version_id", pg.UUID(as_uuid=True)),
    # The envelope's dedupe key as text (migration 0020; its message row keeps the digest): a
    # redrive republishes under it, so the analytics rows collapse with the first publish's.
    sa.Column("dedupe_key", sa.Text),
    sa.CheckConstraint(_in("state", DEAD_LETTER_STATES), name="state_known"),
    sa.CheckConstraint(_in("resolution", DEAD_LETTER_RESOLUTIONS), name="resolution_known"),
    sa.CheckConstraint("(state = 'resolved') = (resolution IS NOT NULL)",
                       name="resolution_shape"),
    sa.Index("ix_dead_letters_state_first_seen", "state", "first_seen_at"),
    sa.Index("ix_dead_letters_signature", "tenant", "state", "reason_code", "failed_stage",
             "schema_version_id", "id", postgresql_include=["first_seen_at", "last_seen_at"]),
)

ingest_delivery_failures = sa.Table(
    "ingest_delivery_failures",
    metadata,
    # The publish failures of one delivery of an envelope that was nak'ed for redelivery
    # (migration 0007), keyed by the envelope's dedupe key: nothing else is recorded for it
    # yet. The transaction that finally records the envelope deletes its rows — after copying
    # them into its dead letter when it is dead-lettered, so the dead letter holds every
    # failed delivery, oldest first.
    sa.Column("key", sa.Text(collation="C"), primary_key=True),
    sa.Column("delivered", sa.Integer, primary_key=True),
    sa.Column("failures", pg.JSONB, nullable=False),
    created_at(),
)

ingest_dedupe_generations = sa.Table(
    "ingest_dedupe_generations",
    metadata,
    # A period of writes of dedupe keys (migration 0012). The newest row is the generation
    # every recording transaction writes its keys into; the maintenance loop starts the next
    # one (under the exclusive advisory lock the writers hold shared) and drops a
    # generation's keys once the one after it started ``retention.dedupe_keys_s`` ago.
    sa.Column("gen", sa.Integer, primary_key=True),
    sa.Column("started_at", _TS, nullable=False, server_default=sa.func.now()),
)

ingest_dedupe_keys = sa.Table(
    "ingest_dedupe_keys",
    metadata,
    # Spec 001's dedupe key as a 128-bit digest (the first half of its SHA-256), in a
    # fixed-width ``uuid`` column: 16 bytes with no length header, in the heap and the index.
    sa.Column("key_hash", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column("gen", sa.Integer, primary_key=True),
    # The owner: the ``ingestion_messages`` row holding the key (id and partition key).
    sa.Column("message_id", sa.BigInteger, nullable=False),
    sa.Column("received_at", _TS, nullable=False),
    postgresql_partition_by="RANGE (gen)",
)

telemetry_corrections = sa.Table(
    "telemetry_corrections",
    metadata,
    # What ``tideway replay --reprocess`` replaced in a telemetry row (migration 0031): the
    # layout (schema version, topic, keys) and values before and after, per correction.
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("ingestion_message_id", sa.BigInteger, nullable=False),
    sa.Column("received_at", _TS, nullable=False),
    sa.Column("reprocess_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("corrected_at", _TS, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("previous_layout", sa.Integer, nullable=False),
    sa.Column("previous_values", pg.JSON, nullable=False),
    sa.Column("values_layout", sa.Integer, nullable=False),
    sa.Column("parameter_list", pg.JSON, nullable=False),
    sa.Index("ix_telemetry_corrections_message", "ingestion_message_id"),
    sa.Index("ix_telemetry_corrections_received", "received_at", postgresql_using="brin"),
)
