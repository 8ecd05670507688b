"""saved tracks: an operator's timing lines per tenant, reused by later sessions (#32 item 5)

``tideway tracks add NAME --start-finish ... [--finish ...] [--sector ...]`` (or
``POST /v1/tracks``, or ``--from-session`` with the lines a session was timed with) stores one
row per tenant and name. Every run created afterwards - upload, reprocess, backfill, a
scheduled backfill - gets the tenant's saved tracks stamped into its config (``tracks``), so
``detect_laps`` reads them from the run like every other input, and a reprocess of the same
run times the same lines.

Intake and the workers read the rows (stamping); the API reads, adds and deletes its tenant's
under row-level security - its one DELETE grant, on rows that are the tenant's own settings,
not records; the operator's command line writes them too.

Revision ID: 0033_saved_tracks
Revises: 0032_backfill_schedules
"""

from __future__ import annotations

from alembic import op

revision = "0033_saved_tracks"
down_revision = "0032_backfill_schedules"
branch_labels = None
depends_on = None

_OTHERS = "tideway_ingest, tideway_intake, tideway_worker, tideway_auth, tideway_maintenance"
_TENANT_ID = "tenant_id = nullif(current_setting('tideway.tenant_id', true), '')::uuid"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE saved_tracks (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            tenant_id uuid NOT NULL,
            name text NOT NULL,
            start_finish jsonb NOT NULL,
            finish jsonb,
            sectors jsonb NOT NULL DEFAULT '[]'::jsonb,
            from_session uuid,
            created_by text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT fk_saved_tracks_tenant_id_tenants FOREIGN KEY (tenant_id)
                REFERENCES tenants (id) ON DELETE RESTRICT,
            CONSTRAINT uq_saved_tracks_tenant_name UNIQUE (tenant_id, name)
        )
        """
    )
    op.execute("CREATE INDEX ix_saved_tracks_tenant_id ON saved_tracks (tenant_id)")
    op.execute("GRANT SELECT ON saved_tracks TO tideway_intake, tideway_worker, "
               "tideway_maintenance")
    op.execute("GRANT SELECT, INSERT, DELETE, UPDATE (start_finish, finish, sectors, "
               "from_session, created_by, created_at) ON saved_tracks TO tideway_api")
    op.execute("ALTER TABLE saved_tracks ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY api_tenant ON saved_tracks TO tideway_api"
               f" USING ({_TENANT_ID}) WITH CHECK ({_TENANT_ID})")
    op.execute(f"CREATE POLICY processes ON saved_tracks TO {_OTHERS}"
               " USING (true) WITH CHECK (true)")


def downgrade() -> None:
    op.execute("DROP TABLE saved_tracks")
