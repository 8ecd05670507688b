"""index the duplicates of a message (``ingestion_messages.duplicate_of``)

``tideway messages show`` lists an envelope's duplicates (``WHERE duplicate_of = $1``); with no
index on ``duplicate_of`` that read scanned every duplicate row. The index is partial: only
duplicate rows, which are rare, carry an entry, so the ingest ``COPY`` of new rows pays nothing.

It is built ``CONCURRENTLY`` (outside the migration's transaction), so ingest into the table
goes on while it builds. A build that fails part-way leaves an invalid index behind; running
the migration again drops it first.

Revision ID: 0006_duplicate_of_index
Revises: 0005_telemetry_values_json
"""

from __future__ import annotations

from alembic import op

revision = "0006_duplicate_of_index"
down_revision = "0005_telemetry_values_json"
branch_labels = None
depends_on = None

_INDEX = "ix_ingestion_messages_duplicate_of"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_INDEX}")
        op.execute(
            f"CREATE INDEX CONCURRENTLY {_INDEX} ON ingestion_messages (duplicate_of)"
            " WHERE duplicate_of IS NOT NULL"
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_INDEX}")
