"""ingestion tables (filled in by the streaming pipeline work)

Revision ID: 0002_ingest
Revises: 0001
"""

from __future__ import annotations

revision = "0002_ingest"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
