"""who resolved a dead letter

``dead_letters.resolved_by``: who closed an operator-resolved dead letter, as the resolve
recorded it - the API key (``api key "<name>" <prefix>``) or the command line (``cli
<os user>``). The console's resolved view shows the note, who and when together; until now
only the note and the time were kept. Dead letters resolved before this revision (and those a
redrive resolved, whose ``resolution`` already says how) keep NULL.

Revision ID: 0026_dead_letter_resolved_by
Revises: 0025_event_outbox
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_dead_letter_resolved_by"
down_revision = "0025_event_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable column without a default: a catalogue change, no rewrite of the table.
    op.add_column("dead_letters", sa.Column("resolved_by", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("dead_letters", "resolved_by")
