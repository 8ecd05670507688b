"""index ingestion_messages by arrival for the console's fleet and device pages

``GET /v1/fleet`` reads one tenant's envelopes of a recent window (the last hour by default) to
compute each device's data-quality figures, and ``GET /v1/devices/{device}/activity`` one
device's newest envelopes. Without an index on the arrival time both scanned the whole table;
with ``(tenant_id, received_at)`` and ``(device_id, received_at)`` each is one index range.
Two more index entries per envelope is the ingest's price for them.

``ingestion_messages`` is partitioned (0012), and Postgres cannot build an index on a partitioned
table ``CONCURRENTLY``: the index is made on the parent, which builds it on every partition (and
on each partition the maintenance loop attaches later). The build blocks writes to the table
while it runs; on a large deployment run this migration in a maintenance window, as 0012.

Revision ID: 0014_console
Revises: 0013_run_outputs_removed
"""

from __future__ import annotations

from alembic import op

revision = "0014_console"
down_revision = "0013_run_outputs_removed"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_ingestion_messages_tenant_received": "(tenant_id, received_at)",
    "ix_ingestion_messages_device_received": "(device_id, received_at)",
}


def upgrade() -> None:
    for name, columns in _INDEXES.items():
        op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON ingestion_messages {columns}")


def downgrade() -> None:
    for name in _INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
