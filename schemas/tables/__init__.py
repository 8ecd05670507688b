"""The one definition of Tideway's Postgres tables (SQLAlchemy Core metadata).

Alembic migrations in ``migrations/`` are written against this metadata, and a test fails when
the two drift. Each area keeps its tables in its own module; importing this package registers
them all on ``metadata``.
"""

from __future__ import annotations

# Imported for the side effect of registering each area's tables on ``metadata``.
from schemas.tables import events, ingest, jobs, registry, retention  # noqa: F401
from schemas.tables.base import metadata

__all__ = ["metadata"]
