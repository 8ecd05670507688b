"""process roles: each Tideway process a Postgres role with only the grants it uses

Issue 26 (spec 004 "Access: service role only", spec 000 §15 least privilege). Until now every
process shared one all-powerful login. This migration creates one group role per process -
NOLOGIN, so no password exists for it; a deployment gives each process a login that is a
member of its role (docs/security.md, "Postgres roles") - and grants each exactly the tables
and statements that process's code uses:

=====================  ==========================================================================
role                   may
=====================  ==========================================================================
tideway_ingest         read the registry; write envelopes' records (messages, stage passes,
                       telemetry, dedupe keys, dead letters, delivery failures, layouts)
tideway_intake         register tenants and devices on first upload; write sessions, artifacts,
                       runs and their planned jobs; count quotas
tideway_worker         claim, run and settle jobs; write datasets; finish runs
tideway_api            read what the API shows; the registry, credentials, dead-letter
                       triage, run actions and uploads it performs - never a DELETE, never a
                       write to envelope records
tideway_auth           read device credentials, devices and tenants (the auth callout)
tideway_maintenance    own the partitioned tables (create, attach, detach and drop partitions;
                       retention), delete what retention expires, read everything for archives
=====================  ==========================================================================

The migrating login (``tideway migrate``) stays the owner of everything else. Roles are
objects of the whole Postgres cluster, not of one database: they are created if missing
(concurrent migrations of two databases may race; the loser finds the role made), and the
downgrade revokes this database's grants but leaves the roles, which other databases of the
cluster may use.

Revision ID: 0022_process_roles
Revises: 0021_device_credentials
"""

from __future__ import annotations

from alembic import op

revision = "0022_process_roles"
down_revision = "0021_device_credentials"
branch_labels = None
depends_on = None

ROLES = ("tideway_ingest", "tideway_intake", "tideway_worker", "tideway_api", "tideway_auth",
         "tideway_maintenance")

REGISTRY = ("tenants", "devices", "device_schemas", "device_schema_versions", "schema_topics",
            "schema_parameters")
ENVELOPE_RECORDS = ("ingestion_messages", "ingestion_stage_passes", "device_telemetry_logs",
                    "ingest_dedupe_keys")
BATCH = ("sessions", "artifacts", "processing_runs", "run_artifacts", "jobs", "job_edges",
         "job_attempts", "derived_datasets", "tenant_daily_usage")

# (privileges, tables, role): every grant of this revision. Column lists are where an
# upsert's ``ON CONFLICT DO UPDATE`` needs UPDATE on one column only.
GRANTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # -- ingest
    ("SELECT", REGISTRY, "tideway_ingest"),
    ("SELECT", ("ingest_dedupe_generations", "ingestion_records", "ingestion_stage_logs"),
     "tideway_ingest"),
    ("SELECT, INSERT, UPDATE", ("ingestion_messages", "ingestion_stage_passes",
                                "device_telemetry_logs", "dead_letters",
                                "telemetry_value_layouts", "ingest_subject_prefixes"),
     "tideway_ingest"),
    ("SELECT, INSERT", ("ingest_dedupe_keys",), "tideway_ingest"),
    ("SELECT, INSERT, UPDATE, DELETE", ("ingest_delivery_failures",), "tideway_ingest"),
    # -- intake
    ("SELECT", (*REGISTRY, "job_attempts", "derived_datasets"), "tideway_intake"),
    ("INSERT", ("tenants", "devices"), "tideway_intake"),
    ("UPDATE (name)", ("tenants",), "tideway_intake"),
    ("UPDATE (external_id)", ("devices",), "tideway_intake"),
    ("SELECT, INSERT, UPDATE", ("sessions", "artifacts", "processing_runs", "run_artifacts",
                                "jobs", "job_edges", "tenant_daily_usage"), "tideway_intake"),
    # -- worker
    ("SELECT", (*REGISTRY, *BATCH), "tideway_worker"),
    ("INSERT, UPDATE", ("jobs", "job_edges", "job_attempts", "processing_runs", "sessions",
                        "artifacts", "run_artifacts", "derived_datasets",
                        "tenant_daily_usage"), "tideway_worker"),
    # -- api: reads everything it shows, writes only what its routes do
    ("SELECT", (*REGISTRY, *BATCH, "api_keys", "device_credentials", "dead_letters",
                "ingestion_messages", "ingestion_stage_passes", "device_telemetry_logs",
                "ingestion_records", "ingestion_stage_logs", "telemetry_value_layouts",
                "ingest_subject_prefixes", "ingest_delivery_failures", "retention_archives"),
     "tideway_api"),
    ("INSERT", ("tenants", "devices", "device_schemas", "device_schema_versions",
                "schema_topics", "schema_parameters", "device_credentials"), "tideway_api"),
    ("UPDATE (name)", ("tenants",), "tideway_api"),
    ("UPDATE", ("devices", "device_schemas", "device_credentials", "dead_letters"),
     "tideway_api"),
    ("INSERT, UPDATE", ("sessions", "artifacts", "processing_runs", "run_artifacts", "jobs",
                        "job_edges", "job_attempts", "tenant_daily_usage"), "tideway_api"),
    # -- auth
    ("SELECT", ("device_credentials", "devices", "tenants"), "tideway_auth"),
    # -- maintenance: owner of ENVELOPE_RECORDS (below); what else retention touches
    ("SELECT", (*REGISTRY, *BATCH, "dead_letters", "telemetry_value_layouts",
                "ingest_subject_prefixes", "ingest_delivery_failures", "ingestion_records",
                "ingestion_stage_logs"), "tideway_maintenance"),
    ("SELECT, INSERT, DELETE", ("ingest_dedupe_generations", "retention_archives"),
     "tideway_maintenance"),
    ("DELETE", ("dead_letters", "derived_datasets"), "tideway_maintenance"),
    ("UPDATE", ("processing_runs",), "tideway_maintenance"),
    # Retention holds a session's row while it decides what of its runs may go (a locking
    # read needs UPDATE on a column).
    ("UPDATE (updated_at)", ("sessions",), "tideway_maintenance"),
)

SEQUENCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tideway_ingest", ("ingestion_messages_id_seq", "dead_letters_id_seq",
                        "ingest_subject_prefixes_id_seq", "telemetry_value_layouts_id_seq")),
    ("tideway_maintenance", ("retention_archives_id_seq",)),
)

# The views over the envelope records run with their owner's rights: owned by the records'
# owner, they keep working for every role granted SELECT on them.
VIEWS = ("ingestion_records", "ingestion_stage_logs")


def upgrade() -> None:
    names = ", ".join(f"'{r}'" for r in ROLES)
    op.execute(
        f"""
        DO $$
        DECLARE r text;
        BEGIN
            FOREACH r IN ARRAY ARRAY[{names}] LOOP
                BEGIN
                    EXECUTE format('CREATE ROLE %I NOLOGIN', r);
                EXCEPTION WHEN duplicate_object OR unique_violation THEN
                    NULL;  -- made by an earlier migration of another database, or right now
                END;
            END LOOP;
        END
        $$
        """
    )
    # The migrating login keeps the right to change what the maintenance role owns (later
    # migrations alter those tables too).
    op.execute(
        """
        DO $$
        BEGIN
            GRANT tideway_maintenance TO CURRENT_USER;
        EXCEPTION WHEN unique_violation THEN
            NULL;  -- granted right now by a concurrent migration of another database
        END
        $$
        """
    )
    for privileges, tables, role in GRANTS:
        op.execute(f"GRANT {privileges} ON {', '.join(tables)} TO {role}")
    # Every pod's wait-for-schema step reads the revision as its own login.
    op.execute(f"GRANT SELECT ON alembic_version TO {', '.join(ROLES)}")
    # Partitions are tables of their own: their maintainer creates them in the schema.
    op.execute("GRANT CREATE ON SCHEMA public TO tideway_maintenance")
    for role, sequences in SEQUENCES:
        op.execute(f"GRANT USAGE, SELECT ON SEQUENCE {', '.join(sequences)} TO {role}")
    # Partitions are created, attached, detached and dropped by their parent's owner: the
    # maintenance role owns the partitioned tables and every partition they have now (those
    # it creates later are its own), and the views over them.
    op.execute(
        """
        DO $$
        DECLARE t regclass;
        BEGIN
            FOR t IN
                SELECT c.oid::regclass FROM pg_class c
                WHERE c.relname = ANY(ARRAY['ingestion_messages', 'ingestion_stage_passes',
                                            'device_telemetry_logs', 'ingest_dedupe_keys'])
                  AND c.relnamespace = 'public'::regnamespace
                UNION
                SELECT i.inhrelid::regclass FROM pg_inherits i
                JOIN pg_class p ON p.oid = i.inhparent
                WHERE p.relname = ANY(ARRAY['ingestion_messages', 'ingestion_stage_passes',
                                            'device_telemetry_logs', 'ingest_dedupe_keys'])
                  AND p.relnamespace = 'public'::regnamespace
            LOOP
                EXECUTE format('ALTER TABLE %s OWNER TO tideway_maintenance', t);
            END LOOP;
        END
        $$
        """
    )
    for view in VIEWS:
        op.execute(f"ALTER VIEW {view} OWNER TO tideway_maintenance")


def downgrade() -> None:
    op.execute(
        """
        DO $$
        DECLARE t regclass;
        BEGIN
            FOR t IN
                SELECT c.oid::regclass FROM pg_class c
                WHERE c.relowner = 'tideway_maintenance'::regrole
                  AND c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v')
            LOOP
                EXECUTE format('ALTER TABLE %s OWNER TO CURRENT_USER', t);
            END LOOP;
        END
        $$
        """
    )
    op.execute("REVOKE CREATE ON SCHEMA public FROM tideway_maintenance")
    for role in ROLES:
        op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
        op.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role}")
