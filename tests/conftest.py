"""Fixtures that give each test its own real services.

Every test gets a fresh Postgres database (cloned from a migrated template made once per run),
a private namespace for NATS streams and Redis keys (deleted afterwards) and its own ClickHouse
database on an in-process chDB engine. Service addresses come from ``TIDEWAY_TEST_*`` variables
and default to the local ports. When a service cannot be reached the test is skipped locally
and fails when ``CI=true``, so CI can never go green by skipping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from streams import migrate
from streams.adapters import postgres
from streams.config import Settings
from streams.names import Names
from tests.shared_data import IN_CI, REPO_ROOT, SHARED_DIR, require, skip_or_fail

__all__ = ["IN_CI", "REPO_ROOT"]  # re-exported for the tests that import them from here

PG_ADMIN_DSN = os.environ.get(
    "TIDEWAY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
NATS_URL = os.environ.get("TIDEWAY_TEST_NATS_URL", "nats://127.0.0.1:4222")
REDIS_URL = os.environ.get("TIDEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 2
        ):
            return True
    except OSError:
        return False


def require_service(url: str, default_port: int, what: str) -> None:
    """Skip (locally) or fail (in CI) when ``what`` at ``url`` cannot be reached."""
    if _reachable(url, default_port):
        return
    skip_or_fail(f"{what} is not reachable at {url}")


def short_id() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database migrated to head once per run; tests clone it (fast)."""
    require_service(PG_ADMIN_DSN, 5432, "PostgreSQL")
    name = f"tw_tmpl_{short_id()}"
    dsn = asyncio.run(postgres.create_database(PG_ADMIN_DSN, name))
    try:
        migrate.upgrade(dsn)
        yield name
    finally:
        asyncio.run(postgres.drop_database(PG_ADMIN_DSN, name))


@pytest.fixture
async def pg_dsn(pg_template: str) -> AsyncIterator[str]:
    """DSN of a fresh, migrated database that only this test uses."""
    name = f"tw_t_{short_id()}"
    dsn = await postgres.create_database(PG_ADMIN_DSN, name, template=pg_template)
    try:
        yield dsn
    finally:
        await postgres.drop_database(PG_ADMIN_DSN, name)


@pytest.fixture
async def empty_pg_dsn() -> AsyncIterator[str]:
    """DSN of a fresh, unmigrated database (for migration tests)."""
    require_service(PG_ADMIN_DSN, 5432, "PostgreSQL")
    name = f"tw_e_{short_id()}"
    dsn = await postgres.create_database(PG_ADMIN_DSN, name)
    try:
        yield dsn
    finally:
        await postgres.drop_database(PG_ADMIN_DSN, name)


@pytest.fixture
async def pg_pool(pg_dsn: str) -> AsyncIterator[object]:
    pool = await postgres.create_pool(pg_dsn, postgres.PoolShape(max_size=5))
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def nats_url() -> str:
    require_service(NATS_URL, 4222, "NATS")
    return NATS_URL


@pytest.fixture
def redis_url() -> str:
    require_service(REDIS_URL, 6379, "Redis")
    return REDIS_URL


@pytest.fixture(scope="session")
def chdb_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One in-process chDB engine per test run (chDB allows one path per process)."""
    return f"chdb://{tmp_path_factory.mktemp('chdb')}"


@pytest.fixture
async def names(nats_url: str, redis_url: str) -> AsyncIterator[Names]:
    """A private namespace; its streams and Redis keys are deleted after the test."""
    names = Names(namespace=f"t{short_id()}")
    yield names
    await _delete_namespace(names, nats_url, redis_url)


async def _delete_namespace(names: Names, nats_url: str, redis_url: str) -> None:
    import nats
    import redis.asyncio as aioredis

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        prefix = names.namespace.upper() + "_"
        for stream in await js.streams_info():
            if stream.config.name and stream.config.name.startswith(prefix):
                await js.delete_stream(stream.config.name)
        for store in (names.session_bucket,):
            with contextlib.suppress(Exception):  # the test may not have made it
                await js.delete_object_store(store)
    finally:
        await nc.close()
    client = aioredis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=names.redis_prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def settings(
    pg_dsn: str, nats_url: str, redis_url: str, chdb_dsn: str, names: Names, tmp_path: Path
) -> Settings:
    """Settings wired to this test's private database, namespace and ClickHouse database."""
    return Settings(
        nats_url=nats_url,
        postgres_dsn=pg_dsn,
        redis_url=redis_url,
        clickhouse_dsn=chdb_dsn,
        clickhouse_database=f"t_{short_id()}",
        namespace=names.namespace,
        data_dir=tmp_path / "data",
        object_store=str(tmp_path / "objects"),
    )


@pytest.fixture
def shared_dir() -> Path:
    """The project's ``shared/`` folder (spec, sample data) beside the repository.

    Skips (locally) or fails (under ``CI=true``) when the folder is absent."""
    return require(SHARED_DIR)
