"""Migrations go up, down to base and up again, and match the metadata exactly."""

from __future__ import annotations

import asyncio

import asyncpg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, pool

from schemas.tables import metadata
from streams import migrate


async def _tables(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        # Partitions are the maintenance loop's business (streams.retention), not the schema's.
        rows = await conn.fetch(
            "SELECT tablename FROM pg_tables t JOIN pg_class c ON c.oid = t.tablename::regclass"
            " WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            " AND NOT c.relispartition"
        )
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


async def test_upgrade_downgrade_upgrade(empty_pg_dsn: str) -> None:
    await asyncio.to_thread(migrate.upgrade, empty_pg_dsn)
    assert await _tables(empty_pg_dsn) == set(metadata.tables)
    assert migrate.current(empty_pg_dsn) == migrate.head()

    await asyncio.to_thread(migrate.downgrade, empty_pg_dsn, "base")
    assert await _tables(empty_pg_dsn) == set()
    assert migrate.current(empty_pg_dsn) is None

    await asyncio.to_thread(migrate.upgrade, empty_pg_dsn)
    assert await _tables(empty_pg_dsn) == set(metadata.tables)


async def test_metadata_and_migrations_do_not_drift(pg_dsn: str) -> None:
    engine = create_engine(migrate.sync_url(pg_dsn), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            partitions = set(conn.exec_driver_sql(
                "SELECT relname FROM pg_class WHERE relispartition AND relkind = 'r'"
            ).scalars())

            def include(_obj: object, name: str | None, type_: str, reflected: bool,
                        _to: object) -> bool:
                return not (type_ == "table" and reflected and name in partitions)

            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "include_object": include})
            diff = compare_metadata(ctx, metadata)
    finally:
        engine.dispose()
    assert diff == [], f"schemas/tables and migrations/ disagree: {diff}"


def test_each_revision_steps_down_and_up(empty_pg_dsn: str) -> None:
    """Walk every revision one step at a time, so each downgrade is exercised on its own."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config(empty_pg_dsn))
    revisions = [r.revision for r in reversed(list(script.walk_revisions()))]
    for rev in revisions:
        migrate.upgrade(empty_pg_dsn, rev)
        assert migrate.current(empty_pg_dsn) == rev
    for rev in reversed(revisions):
        migrate.downgrade(empty_pg_dsn, "-1")
        assert migrate.current(empty_pg_dsn) != rev
    assert migrate.current(empty_pg_dsn) is None
