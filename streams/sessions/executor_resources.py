"""What the I/O executors of the session DAG borrow from the executor table.

``materialise_clickhouse`` and ``publish_session`` run on the event loop and share the table's
DAG, settings, object store and database pool (provided by
:class:`~streams.sessions.stage_executors.SessionExecutors`). They depend on this protocol
rather than on that class, so the table can build them without the modules importing each
other.
"""

from __future__ import annotations

from typing import Any, Protocol

from stages.jobs.graph import Dag
from streams.config import Settings
from streams.objects import ObjectStore


class ExecutorResources(Protocol):
    """The DAG, settings, object store and a lazily created asyncpg pool the executors share."""

    @property
    def dag(self) -> Dag:
        """The DAG the executors were built for (its declarations type the job summaries)."""
        ...

    @property
    def settings(self) -> Settings:
        """The settings the executors were built with."""
        ...

    @property
    def store(self) -> ObjectStore:
        """The object store holding artifacts and datasets."""
        ...

    async def db(self) -> Any:
        """A small asyncpg pool (created on first use, closed with the table)."""
        ...
