"""row-level security: the API role sees and writes only the request's tenant's rows

Issue 26, the second wall behind the queries' own ``WHERE``. On every tenant-scoped table the
HTTP API reads, row-level security is on, and the ``tideway_api`` role's policy admits a row
only when it belongs to the tenant the request set for its transaction
(``tideway.tenant_id``, and ``tideway.tenant`` for the dead letters, which name their tenant;
``streams.api.tenant_db`` sets both with ``set_config(..., true)`` before each statement). With
no tenant set, the API role sees nothing. ``WITH CHECK`` refuses writing a row of another
tenant.

The other process roles keep seeing every row (a policy of ``true`` each: they serve every
tenant); the tables' owners and superusers bypass row-level security, so ``tideway up``'s one
login and ``tideway migrate`` are unaffected.

Envelope records (messages, stage passes, telemetry) are not among the tables: the API reads
them only joined to a device (which the policy covers) or through the ``ingestion_records`` /
``ingestion_stage_logs`` views, and the hot path's partitioned tables stay without a policy
to evaluate per row.

Revision ID: 0023_row_level_security
Revises: 0022_process_roles
"""

from __future__ import annotations

from alembic import op

revision = "0023_row_level_security"
down_revision = "0022_process_roles"
branch_labels = None
depends_on = None

BY_TENANT_ID = ("devices", "device_schemas", "device_credentials", "sessions", "artifacts",
                "processing_runs", "jobs", "tenant_daily_usage")
BY_TENANT_NAME = ("dead_letters",)
OTHERS = "tideway_ingest, tideway_intake, tideway_worker, tideway_auth, tideway_maintenance"

_TENANT_ID = "tenant_id = nullif(current_setting('tideway.tenant_id', true), '')::uuid"
_TENANT_NAME = "tenant = nullif(current_setting('tideway.tenant', true), '')"


def upgrade() -> None:
    for table, rule in [*((t, _TENANT_ID) for t in BY_TENANT_ID),
                        *((t, _TENANT_NAME) for t in BY_TENANT_NAME)]:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY api_tenant ON {table} TO tideway_api"
                   f" USING ({rule}) WITH CHECK ({rule})")
        op.execute(f"CREATE POLICY processes ON {table} TO {OTHERS}"
                   " USING (true) WITH CHECK (true)")


def downgrade() -> None:
    for table in (*BY_TENANT_ID, *BY_TENANT_NAME):
        op.execute(f"DROP POLICY IF EXISTS processes ON {table}")
        op.execute(f"DROP POLICY IF EXISTS api_tenant ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
