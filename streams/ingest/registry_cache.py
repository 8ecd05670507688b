"""The registry as one consumer process sees it: cached, and fetched set-based on a miss.

* Compiled topics are cached **forever** by schema version id: versions are immutable, so a
  program compiled once stays right, and no expression is ever compiled per envelope.
* Device rows are cached for ``consumer.registry_ttl_s`` (a couple of seconds), unknown
  devices included, so a deactivation or a new assignment takes effect that quickly and a
  flood of envelopes from an unregistered device costs one query per TTL, not one per batch.

A batch's misses cost at most two queries (devices, then schema versions), whatever its size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from schemas.device_schema import SchemaFile
from stages.errors import StageError
from stages.ingest.evaluate import DeviceRecord, Registry, TopicBinding
from stages.ingest.program import compile_schema
from streams.adapters.postgres import Conn
from streams.ingest import sql

log = logging.getLogger(__name__)


class RegistryCache:
    """Per-process cache of devices (short TTL) and compiled topics (forever)."""

    def __init__(self, *, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._devices: dict[tuple[str, str], tuple[float, DeviceRecord | None]] = {}
        self._topics: dict[tuple[UUID, str], TopicBinding] = {}
        self._versions: set[UUID] = set()
        self._hits = 0
        self._misses = 0

    def take_counts(self) -> tuple[int, int]:
        """Device lookups answered from the cache and sent to Postgres since the last call
        (each batch takes its share for the metrics; concurrent batches still sum exactly)."""
        counts = (self._hits, self._misses)
        self._hits = self._misses = 0
        return counts

    async def view(self, conn: Conn, pairs: Iterable[tuple[str, str]]) -> Registry:
        """The lookups for a batch naming ``(tenant, device)`` ``pairs``."""
        now = self.clock()
        devices: dict[tuple[str, str], DeviceRecord] = {}
        missing: list[tuple[str, str]] = []
        unique = set(pairs)
        for pair in unique:
            cached = self._devices.get(pair)
            if cached is None or now - cached[0] > self.ttl_s:
                missing.append(pair)
            elif cached[1] is not None:
                devices[pair] = cached[1]
        self._hits += len(unique) - len(missing)  # a device known not to exist is a hit too
        self._misses += len(missing)
        if missing:
            found = await self._fetch_devices(conn, missing)
            for pair in missing:
                record = found.get(pair)
                self._devices[pair] = (now, record)
                if record is not None:
                    devices[pair] = record
        versions = {d.schema_version_id for d in devices.values() if d.schema_version_id}
        unknown = versions - self._versions
        if unknown:
            await self._load_versions(conn, unknown)
        return Registry(devices=devices, topics=self._topics)

    async def binding(self, conn: Conn, version_id: UUID, topic: str) -> TopicBinding | None:
        """The compiled ``topic`` of schema version ``version_id`` (loaded once)."""
        if version_id not in self._versions:
            await self._load_versions(conn, {version_id})
        return self._topics.get((version_id, topic))

    def forget_devices(self) -> None:
        """Drop every cached device row (the next batch re-reads them)."""
        self._devices.clear()

    async def _fetch_devices(
        self, conn: Conn, pairs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], DeviceRecord]:
        rows = await conn.fetch(sql.DEVICES, [p[0] for p in pairs], [p[1] for p in pairs])
        return {
            (row["tenant"], row["external_id"]): DeviceRecord(
                id=row["id"], tenant_id=row["tenant_id"], tenant=row["tenant"],
                external_id=row["external_id"], active=row["active"],
                schema_version_id=row["schema_version_id"],
            )
            for row in rows
        }

    async def _load_versions(self, conn: Conn, ids: set[UUID]) -> None:
        for row in await conn.fetch(sql.SCHEMA_VERSIONS, list(ids)):
            self._compile(row)
            self._versions.add(row["id"])

    def _compile(self, row: Any) -> None:
        version_id: UUID = row["id"]
        try:
            schema = SchemaFile.model_validate(row["spec"])
            programs = compile_schema(schema, filename=f"{row['schema']}@{version_id}")
        except (StageError, ValueError) as exc:
            # The registry compiles before it stores, so this means a Tideway upgrade made an
            # old version invalid: its envelopes end as UNKNOWN_TOPIC and the log says why.
            why = exc.describe() if isinstance(exc, StageError) else exc
            log.error("schema version %s does not compile any more: %s", version_id, why)
            return
        topic_ids = {name: UUID(str(value)) for name, value in row["topic_ids"].items()}
        for name, program in programs.items():
            if name in topic_ids:
                self._topics[(version_id, name)] = TopicBinding(
                    schema_version_id=version_id, schema_topic_id=topic_ids[name],
                    program=program,
                )
