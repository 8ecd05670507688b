"""index ingestion_messages by arrival for the console's fleet and device pages

``GET /v1/fleet`` reads one tenant's envelopes of a recent window (the last hour by default) to
compute each device's data-quality figures, and ``GET /v1/devices/{device}/activity`` one
device's newest envelopes. Without an index on the arrival time both scanned the whole table;
with ``(tenant_id, received_at)`` and ``(device_id, received_at)`` each is one index range.
Two more index entries per envelope is the ingest's price for them.

Built ``CONCURRENTLY`` (outside the migration's transaction) so ingest goes on meanwhile; a
build that failed part-way leaves an invalid index, which running the migration again drops.

Revision ID: 0014_console
Revises: 0011_tenant_quotas
"""

from __future__ import annotations

from alembic import op

revision = "0014_console"
down_revision = "0011_tenant_quotas"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_ingestion_messages_tenant_received": "(tenant_id, received_at)",
    "ix_ingestion_messages_device_received": "(device_id, received_at)",
}


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, columns in _INDEXES.items():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"CREATE INDEX CONCURRENTLY {name} ON ingestion_messages {columns}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name in _INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
