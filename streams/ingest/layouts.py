"""Telemetry value layouts: what the ``device_telemetry_logs`` rows of one schema version and
topic with the same parameters present share.

A telemetry row stores its values as a JSON array and the id of its layout in
``telemetry_value_layouts`` (migration 0018): schema version, topic and the values' keys in
order, written once per layout instead of once per row. A deployment has a handful of layouts
(a few per schema version and topic: the keys are the topic's parameters in the compiled
schema's order, every measured one present, ``null`` when the envelope lacks it, so they vary
only with the stages reached, never with what a device sends), each registered by the first
writer that meets it and never changed, so each process keeps every id it has seen for good
and asks Postgres only on a miss — outside the recording transaction, so an id it caches is
always committed.
"""

from __future__ import annotations

from collections.abc import Iterable

from stages.ingest.plan import LayoutKey
from streams.adapters.postgres import Pool
from streams.ingest import sql


class ValueLayouts:
    """This process's cache of layout ids."""

    def __init__(self) -> None:
        self.ids: dict[LayoutKey, int] = {}

    async def ensure(self, pool: Pool, layouts: Iterable[LayoutKey | None]) -> None:
        """Make sure every layout in ``layouts`` has an id in :attr:`ids` (``None`` skipped)."""
        ids = self.ids
        missing = {layout for layout in layouts if layout is not None and layout not in ids}
        if not missing:
            return
        async with pool.acquire() as conn:
            for layout in missing:
                version, topic, names = layout
                ids[layout] = int(await conn.fetchval(sql.REGISTER_LAYOUT, version, topic,
                                                      list(names)))
