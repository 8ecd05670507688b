"""telemetry corrections: what a reprocess replaced

``tideway replay --reprocess`` runs envelopes already recorded through the current schema
version again (issue 31: a corrected mutate or derived expression repairs the values recorded
before the fix). It updates the envelope's telemetry row in place - its values layout, which
names the schema version and topic, and its values - and keeps what it replaced here, one row
per correction: the layout and values before and after, when, and by which reprocess. So
``messages show`` can say which version produced which values, and when; the row stays the
one place readers find an envelope's current values.

Read by the API (``messages show``); the maintenance role may read and delete them. Corrections
are operator actions, a few rows per repaired envelope; retention does not expire them yet.

Revision ID: 0031_telemetry_corrections
Revises: 0026_dead_letter_resolved_by
"""

from __future__ import annotations

from alembic import op

revision = "0031_telemetry_corrections"
down_revision = "0026_dead_letter_resolved_by"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE telemetry_corrections (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            ingestion_message_id bigint NOT NULL,
            received_at timestamptz NOT NULL,
            reprocess_id uuid NOT NULL,
            corrected_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            previous_layout integer NOT NULL,
            previous_values json NOT NULL,
            values_layout integer NOT NULL,
            parameter_list json NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX ix_telemetry_corrections_message "
               "ON telemetry_corrections (ingestion_message_id)")
    op.execute("CREATE INDEX ix_telemetry_corrections_received "
               "ON telemetry_corrections USING brin (received_at)")
    op.execute("GRANT SELECT ON telemetry_corrections TO tideway_api")
    op.execute("GRANT SELECT, DELETE ON telemetry_corrections TO tideway_maintenance")


def downgrade() -> None:
    op.execute("DROP TABLE telemetry_corrections")
