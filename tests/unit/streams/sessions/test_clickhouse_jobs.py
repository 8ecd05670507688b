"""Which job types need ClickHouse, and which workers open an embedded one at start."""

from __future__ import annotations

import importlib

from stages.jobs.dag import DEFAULT_DAG
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.sessions.clickhouse_jobs import (
    CLICKHOUSE_JOBS,
    clickhouse_pools,
    hold_embedded_clickhouse,
)


def test_the_declared_clickhouse_jobs_are_the_executors_that_use_clickhouse() -> None:
    """The declaration follows the code: a job type's executor module uses the ClickHouse
    adapter exactly when the type is declared (a new ClickHouse job must be added there)."""
    using = set()
    for spec in DEFAULT_DAG.values():
        if spec.executor:
            module = importlib.import_module(spec.executor.partition(":")[0])
            if any(value is ClickHouse for value in vars(module).values()):
                using.add(spec.job_type)
    assert using == set(CLICKHOUSE_JOBS)
    assert clickhouse_pools() == {"io"}


async def test_only_a_worker_that_would_run_clickhouse_jobs_on_chdb_opens_it() -> None:
    assert not await hold_embedded_clickhouse(Settings(clickhouse_dsn=None), pool=None)
    server = Settings(clickhouse_dsn="http://127.0.0.1:1")  # never reached
    assert not await hold_embedded_clickhouse(server, pool=None)
    embedded = Settings(clickhouse_dsn="chdb:///nonexistent/never-opened")
    for pool in ("cpu", "heavy"):
        assert not await hold_embedded_clickhouse(embedded, pool=pool)
