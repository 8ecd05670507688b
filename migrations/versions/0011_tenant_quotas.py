"""tenant quotas and priority ceiling (spec 000 §12)

* ``tenants.max_active_runs``, ``max_priority``, ``daily_artifacts_quota``,
  ``daily_bytes_quota``: a tenant's own limits; ``NULL`` means the ``quotas`` settings' default.
* ``tenant_daily_usage``: what each tenant uploaded per UTC day (artifacts and bytes), reserved
  atomically by an upload before its files are stored (``streams.sessions.quotas``).

Revision ID: 0011_tenant_quotas
Revises: 0009_job_lifecycle
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_tenant_quotas"
down_revision = "0009_job_lifecycle"
branch_labels = None
depends_on = None

_LIMITS = (
    ("max_active_runs", sa.Integer()),
    ("max_priority", sa.Integer()),
    ("daily_artifacts_quota", sa.Integer()),
    ("daily_bytes_quota", sa.BigInteger()),
)


def upgrade() -> None:
    for name, kind in _LIMITS:
        op.add_column("tenants", sa.Column(name, kind, nullable=True))
    op.create_check_constraint(
        op.f("ck_tenants_limits_positive"),
        "tenants",
        "coalesce(max_active_runs, 1) >= 1 AND coalesce(daily_artifacts_quota, 0) >= 0"
        " AND coalesce(daily_bytes_quota, 0) >= 0",
    )
    op.create_table(
        "tenant_daily_usage",
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("artifacts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_tenant_daily_usage_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "day", name=op.f("pk_tenant_daily_usage")),
    )


def downgrade() -> None:
    op.drop_table("tenant_daily_usage")
    op.drop_constraint(op.f("ck_tenants_limits_positive"), "tenants", type_="check")
    for name, _ in reversed(_LIMITS):
        op.drop_column("tenants", name)
