"""dead letters an operator can clear, and every failed delivery kept for its dead letter

* ``dead_letters.resolution`` (``redriven`` | ``operator``) and ``resolution_note``: how a
  resolved dead letter was closed. A malformed envelope can never be redriven, so an operator
  resolves it (``tideway dlq resolve``) with a note saying why; the state and the resolution
  agree (a CHECK), and the dead letters redrive resolved before this revision are backfilled
  as ``redriven`` (the only way one could be resolved until now).
* ``ingest_delivery_failures``: the publish failures of deliveries that earned a redelivery.
  An envelope that is dead-lettered after ``max_deliver`` deliveries has its dead letter
  record all of them, not only the last; the rows of an envelope are consumed (deleted) by the
  transaction that records it.

Revision ID: 0007_dead_letter_resolution
Revises: 0006_duplicate_of_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007_dead_letter_resolution"
down_revision = "0006_duplicate_of_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dead_letters", sa.Column("resolution", sa.Text(), nullable=True))
    op.add_column("dead_letters", sa.Column("resolution_note", sa.Text(), nullable=True))
    op.execute("UPDATE dead_letters SET resolution = 'redriven' WHERE state = 'resolved'")
    op.create_check_constraint(
        op.f("ck_dead_letters_resolution_known"),
        "dead_letters",
        "resolution IN ('redriven', 'operator')",
    )
    op.create_check_constraint(
        op.f("ck_dead_letters_resolution_shape"),
        "dead_letters",
        "(state = 'resolved') = (resolution IS NOT NULL)",
    )
    op.create_table(
        "ingest_delivery_failures",
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        sa.Column("delivered", sa.Integer(), nullable=False),
        sa.Column("failures", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("key", "delivered", name=op.f("pk_ingest_delivery_failures")),
    )


def downgrade() -> None:
    op.drop_table("ingest_delivery_failures")
    op.drop_constraint(op.f("ck_dead_letters_resolution_shape"), "dead_letters", type_="check")
    op.drop_constraint(op.f("ck_dead_letters_resolution_known"), "dead_letters", type_="check")
    op.drop_column("dead_letters", "resolution_note")
    op.drop_column("dead_letters", "resolution")
