"""job engine tables (filled in by the job engine work)

Revision ID: 0003_jobs
Revises: 0002_ingest
"""

from __future__ import annotations

revision = "0003_jobs"
down_revision = "0002_ingest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
