"""The one definition of Tideway's Postgres tables (SQLAlchemy Core metadata).

Alembic migrations in ``migrations/`` are written against this metadata, and a test fails when
the two drift. Each area keeps its tables in its own module; importing this package registers
them all on ``metadata``.
"""

from __future__ import annotations

from schemas.tables.base import metadata

# Import for the side effect of registering each area's tables on ``metadata``.
from schemas.tables import registry  # noqa: F401  isort: skip

for _area in ("ingest", "jobs"):
    try:
        __import__(f"schemas.tables.{_area}")
    except ModuleNotFoundError as exc:  # an area not yet written
        if exc.name != f"schemas.tables.{_area}":
            raise

__all__ = ["metadata"]
