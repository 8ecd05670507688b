"""backfill schedules: a backfill run by the clock (spec 003, "time-based (cron)")

``tideway runs schedule add NAME --cron '0 3 * * *' [--device D] [--uploaded-within 7d]``
stores one row per tenant and name. A worker takes a due schedule's row (``FOR UPDATE SKIP
LOCKED``, so one worker runs each tick), runs the backfill in that transaction - a backfill
starts one run per session not yet at the current versions, so a tick after nothing changed
starts nothing - and sets the next time from the cron expression and the tick's outcome. A
worker that dies mid-tick rolls it back; the next one runs it. A tick missed while no worker
ran is run once when one is back, not once per missed time.

The worker reads and updates the schedules; the API reads its tenant's (row-level security,
as on the other tenant tables); the operator's command line writes them.

Revision ID: 0032_backfill_schedules
Revises: 0031_telemetry_corrections
"""

from __future__ import annotations

from alembic import op

revision = "0032_backfill_schedules"
down_revision = "0031_telemetry_corrections"
branch_labels = None
depends_on = None

_OTHERS = "tideway_ingest, tideway_intake, tideway_worker, tideway_auth, tideway_maintenance"
_TENANT_ID = "tenant_id = nullif(current_setting('tideway.tenant_id', true), '')::uuid"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE backfill_schedules (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            tenant_id uuid NOT NULL,
            name text NOT NULL,
            cron text NOT NULL,
            device text,
            uploaded_within_s double precision,
            priority integer NOT NULL,
            enabled boolean NOT NULL DEFAULT true,
            created_by text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            next_run_at timestamptz NOT NULL,
            last_run_at timestamptz,
            last_outcome jsonb,
            last_error text,
            CONSTRAINT fk_backfill_schedules_tenant_id_tenants FOREIGN KEY (tenant_id)
                REFERENCES tenants (id) ON DELETE RESTRICT,
            CONSTRAINT uq_backfill_schedules_tenant_name UNIQUE (tenant_id, name),
            CONSTRAINT ck_backfill_schedules_within CHECK (uploaded_within_s > 0)
        )
        """
    )
    op.execute("CREATE INDEX ix_backfill_schedules_tenant_id ON backfill_schedules (tenant_id)")
    op.execute("CREATE INDEX ix_backfill_schedules_due ON backfill_schedules (next_run_at) "
               "WHERE enabled")
    op.execute("GRANT SELECT, UPDATE (next_run_at, last_run_at, last_outcome, last_error) "
               "ON backfill_schedules TO tideway_worker")
    op.execute("GRANT SELECT ON backfill_schedules TO tideway_api, tideway_maintenance")
    op.execute("ALTER TABLE backfill_schedules ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY api_tenant ON backfill_schedules TO tideway_api"
               f" USING ({_TENANT_ID}) WITH CHECK ({_TENANT_ID})")
    op.execute(f"CREATE POLICY processes ON backfill_schedules TO {_OTHERS}"
               " USING (true) WITH CHECK (true)")


def downgrade() -> None:
    op.execute("DROP TABLE backfill_schedules")
