"""retention archives: the Parquet export of each partition dropped with archiving on

``retention_archives``: one row per expired partition that retention exported to the object
store before dropping it (``streams.retention.archive``). The row is written in the same
transaction as the drop, so a partition is either still in Postgres or recorded here (never
neither). It says where the Parquet object is, what it hashes to, how many rows and bytes it
holds, the partition's time range and the range of message ids in it (so ``tideway messages
show`` reads only the objects that can hold a message).

Revision ID: 0016_retention_archives
Revises: 0015_active_runs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_retention_archives"
down_revision = "0015_active_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "retention_archives",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tier", sa.Text(), nullable=False),
        sa.Column("parent_table", sa.Text(), nullable=False),
        sa.Column("partition_name", sa.Text(), nullable=False),
        sa.Column("range_lo", sa.DateTime(timezone=True), nullable=False),
        sa.Column("range_hi", sa.DateTime(timezone=True), nullable=False),
        sa.Column("object_key", sa.Text(), nullable=False),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("message_id_min", sa.BigInteger(), nullable=True),
        sa.Column("message_id_max", sa.BigInteger(), nullable=True),
        sa.Column(
            "archived_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="ck_retention_archives_sha256_hex"),
        sa.CheckConstraint("bytes >= 0 AND rows >= 0", name="ck_retention_archives_sizes"),
        sa.CheckConstraint("range_lo < range_hi", name="ck_retention_archives_range"),
        sa.PrimaryKeyConstraint("id", name="pk_retention_archives"),
        sa.UniqueConstraint("object_key", name="uq_retention_archives_object_key"),
    )
    # The message lookup: a table's objects, newest first (read backwards).
    op.create_index(
        "ix_retention_archives_lookup", "retention_archives", ["parent_table", "range_lo"]
    )


def downgrade() -> None:
    op.drop_table("retention_archives")
