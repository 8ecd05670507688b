"""Run Alembic migrations programmatically (``tideway migrate``, ``tideway up``, tests).

Alembic is synchronous; the runtime uses asyncpg DSNs (``postgresql://``), so the DSN is
rewritten for the psycopg driver here, in one place. Call from async code via
``asyncio.to_thread``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from streams.adapters.postgres import split_dsn

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic and SQLAlchemy are imported where they are used: this module is imported by every
# CLI start (`tideway config`), and they took 0.32 s of its 2.0 s of imports.

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def sync_url(dsn: str) -> str:
    """``postgresql://…`` (asyncpg style) → ``postgresql+psycopg://…`` (SQLAlchemy sync),
    without the asyncpg-only ``statement_cache_size`` option (libpq refuses it)."""
    dsn = split_dsn(dsn)[0]
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn[len(prefix) :]
    return dsn


def alembic_config(dsn: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", sync_url(dsn).replace("%", "%%"))
    return cfg


def upgrade(dsn: str, revision: str = "head") -> None:
    """Migrate the database at ``dsn`` up to ``revision``."""
    from alembic import command

    command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str) -> None:
    """Migrate the database at ``dsn`` down to ``revision`` (``base`` for empty)."""
    from alembic import command

    command.downgrade(alembic_config(dsn), revision)


def current(dsn: str) -> str | None:
    """The revision the database is at (None when unmigrated)."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine, pool

    engine = create_engine(sync_url(dsn), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head() -> str | None:
    """The newest revision in ``migrations/``."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()
