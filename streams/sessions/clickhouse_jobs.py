"""The session jobs that need ClickHouse, and the worker that may run them on an embedded one.

An embedded ClickHouse (``chdb://<path>``) runs inside the process that opens it, and chDB lets
one process open a data directory at a time (``streams.clickhouse``). Two workers that both run
``materialise_clickhouse`` and ``publish_session`` on the same directory therefore cannot both
succeed: the one that opened it first runs them, and every attempt claimed by the other failed
with ``CLICKHOUSE_BUSY`` and bounced through its retries for minutes (issue 27).

So a worker that would claim those jobs (its pool, ``--pool``, is one of theirs, or it runs
every pool) opens the embedded engine when it starts, and keeps it for its lifetime. The first
such worker gets it; the next one refuses to start, naming the holder and the two setups that
work: one worker on the ``io`` pool and the others on ``cpu`` / ``heavy``, or a ClickHouse
server that every process can share. A worker on a ClickHouse server opens nothing at start
(a server that is down only makes those jobs wait and retry, as any outage does).
"""

from __future__ import annotations

from typing import Final

from stages.jobs.dag import DEFAULT_DAG
from streams.clickhouse import ClickHouse, embedded_holder, embedded_path
from streams.config import Settings
from streams.errors import ConfigError, TransientError

__all__ = ["CLICKHOUSE_JOBS", "clickhouse_pools", "hold_embedded_clickhouse"]

CLICKHOUSE_JOBS: Final = ("materialise_clickhouse", "publish_session")
"""The job types whose executors open ClickHouse: the load, and publish's health check, which
counts the loaded rows (a unit test checks this against the executors' modules)."""


def clickhouse_pools() -> frozenset[str]:
    """The pools that hold the ClickHouse jobs (``io``)."""
    return frozenset(DEFAULT_DAG[job].pool for job in CLICKHOUSE_JOBS)


async def hold_embedded_clickhouse(settings: Settings, *, pool: str | None) -> bool:
    """Open the embedded ClickHouse now if a worker of ``pool`` (``None``: every pool) would
    run ClickHouse jobs on one; returns whether it did. The engine then stays open in this
    process, as chDB keeps it.

    Raises ``CLICKHOUSE_BUSY`` (a :class:`ConfigError`: this setup cannot work, a retry of the
    start would not help) when another process holds the directory."""
    if settings.clickhouse_dsn is None:  # those jobs fail with CONFIG_ERROR, as before
        return False
    dsn = settings.clickhouse()
    path = embedded_path(dsn)
    if path is None or (pool is not None and pool not in clickhouse_pools()):
        return False
    try:
        await ClickHouse(dsn, settings.clickhouse_database).check()
    except TransientError as exc:
        if exc.code != "CLICKHOUSE_BUSY":
            raise
        pid = embedded_holder(dsn)
        holder = f"process {pid}" if pid else "another process"
        jobs = " and ".join(CLICKHOUSE_JOBS)
        raise ConfigError(
            f"this worker would run {jobs}, but the embedded ClickHouse (chDB) at {path} is"
            f" held by {holder} and chDB lets one process open it, so those jobs would fail"
            f" here until they ran out of retries. Run one worker on the io pool (`tideway"
            f" worker --pool io`) and the others with --pool cpu or --pool heavy, or set"
            f" TIDEWAY_CLICKHOUSE_DSN to a ClickHouse server that every worker can share",
            code="CLICKHOUSE_BUSY",
        ) from exc
    return True
