"""``tideway messages show``: explain one envelope.

Everything Tideway knows about one ``ingestion_messages`` row: its status and receipt, each
stage log in order (per processing pass), its telemetry row, the duplicates it absorbed (or
the row it duplicates), its dead letter, and where it was published — the device's hot-state
key and whether that key currently holds this envelope, and how many analytics rows it has.
The hot state and ClickHouse are asked live; when one cannot be reached (an embedded chDB
engine held by a running consumer, for instance) the answer says so instead of failing.
"""

from __future__ import annotations

from typing import Any

from stages.ingest.ingress import key_hash
from streams.adapters.postgres import Conn
from streams.config import Settings
from streams.errors import NotFoundError
from streams.ingest import sql
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import HotState
from streams.ingest.resources import Resources


async def find_id(conn: Conn, ident: str) -> int:
    """An ``ingestion_messages`` id from a numeric id or a dedupe key (a key is found while
    its dedupe generation is kept: docs/storage.md, the dedupe horizon)."""
    if ident.isdigit():
        return int(ident)
    found = await conn.fetchval(sql.MESSAGE_BY_KEY, key_hash(ident))
    if found is None:
        raise NotFoundError(f"no envelope with id or dedupe key {ident!r} (a key is "
                            "forgotten once its dedupe generation is dropped)")
    return int(found)


async def explain(settings: Settings, ident: str, *, tenant: str | None = None) -> dict[str, Any]:
    """Everything about one envelope (see the module docstring); with ``tenant``, an envelope
    of another tenant is not found, like one that does not exist."""
    resources = await Resources.open(settings, name="tideway-messages", pool_size=1, nats=False)
    try:
        async with resources.pool.acquire() as conn:
            message_id = await find_id(conn, ident)
            row = await conn.fetchrow(sql.MESSAGE, message_id)
            if row is None:
                raise NotFoundError(f"no envelope with id {message_id}")
            message = dict(row)
            # The subject as received, also where the row leaves it out (migration 0017).
            message["subject"] = message.pop("full_subject")
            message.pop("subject_prefix", None)
            owner = message_id if message["duplicate_of"] is None else message["duplicate_of"]
            stages = [dict(r) for r in await conn.fetch(sql.MESSAGE_STAGE_LOGS, message_id)]
            telemetry = await conn.fetchrow(sql.MESSAGE_TELEMETRY, message_id)
            duplicates = [dict(r) for r in await conn.fetch(sql.MESSAGE_DUPLICATES, owner)]
            dead = await conn.fetchrow(sql.MESSAGE_DEAD_LETTER, message_id)
        # A malformed envelope has no tenant row; its dead letter names the subject's tenant.
        owner_tenant = row["tenant"] or (dead["tenant"] if dead else None)
        if tenant is not None and owner_tenant != tenant:
            raise NotFoundError(f"no envelope with id {message_id}")
        out: dict[str, Any] = {
            "message": message,
            "stages": stages,
            "telemetry": dict(telemetry) if telemetry else None,
            "duplicates": duplicates if message["duplicate_of"] is None else [],
            "dead_letter": _dead_letter(dict(dead)) if dead else None,
        }
        if telemetry is not None and message["status"] == "completed":
            out["published"] = await _published(resources, message, dict(telemetry))
        return out
    finally:
        await resources.close()


def _dead_letter(dead: dict[str, Any]) -> dict[str, Any]:
    payload: bytes = dead.pop("payload")
    dead["payload_bytes"] = len(payload)
    return dead


async def _published(resources: Resources, message: dict[str, Any],
                     telemetry: dict[str, Any]) -> dict[str, Any]:
    key = resources.names.hot_state_key(message["tenant"], message["device"])
    out: dict[str, Any] = {"hot_state_key": key, "hot_state_field": telemetry["topic"],
                           "analytics_table": resources.names.analytics_table}
    try:
        state = await HotState(resources.redis).read(key)
        current = state.get(telemetry["topic"]) or {}
        out["hot_state_current"] = current.get("message_key") == message["source_deduplication_key"]
        out["hot_state_seq"] = current.get("seq")
    except Exception as exc:  # an explanation must not fail because Redis is away
        out["hot_state_current"] = f"unavailable: {exc}"
    try:
        analytics = Analytics(resources.clickhouse, resources.names.analytics_table)
        out["analytics_rows"] = await analytics.count_for(message["source_deduplication_key"])
    except Exception as exc:  # a chDB engine held by another process, for instance
        out["analytics_rows"] = f"unavailable: {exc}"
    return out
