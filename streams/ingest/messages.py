"""``tideway messages show``: explain one envelope.

Everything Tideway knows about one ``ingestion_messages`` row: its status and receipt, each
stage log in order (per processing pass), its telemetry row, the duplicates it absorbed (or
the row it duplicates), its dead letter, and where it was published — the device's hot-state
key and whether that key currently holds this envelope, and how many analytics rows it has.
The hot state and ClickHouse are asked live; when one cannot be reached (an embedded chDB
engine held by a running consumer, for instance) the answer says so instead of failing.

When retention has dropped the envelope's rows (all of them, or its stage logs, which go
first) and archived them (``retention.archive``), the same statements explain it from the
archive (:mod:`streams.retention.restore`), and the answer's ``archive`` names the objects
read.
"""

from __future__ import annotations

from typing import Any

from stages.ingest.ingress import digest_of
from streams.adapters.postgres import Conn
from streams.config import Settings
from streams.errors import NotFoundError, TidewayError
from streams.ingest import sql
from streams.ingest.analytics import Analytics
from streams.ingest.hot_state import HotState
from streams.ingest.resources import Resources
from streams.objects import ObjectStore
from streams.retention.restore import any_archive, restored


async def find_id(conn: Conn, ident: str) -> int | None:
    """An ``ingestion_messages`` id from a numeric id, a dedupe key or its digest (a key is
    found while its dedupe generation is kept: docs/storage.md, the dedupe horizon); ``None``
    for a key no longer known (the archive may know it)."""
    if ident.isdigit():
        return int(ident)
    found = await conn.fetchval(sql.MESSAGE_BY_KEY, digest_of(ident))
    return None if found is None else int(found)


async def _gather(conn: Conn, message_id: int) -> dict[str, Any] | None:
    """The envelope's rows as the statements find them on ``conn`` (``None``: no such row)."""
    row = await conn.fetchrow(sql.MESSAGE, message_id)
    if row is None:
        return None
    message = dict(row)
    # The subject as received, also where the row leaves it out (migration 0018).
    message["subject"] = message.pop("full_subject")
    message.pop("subject_prefix", None)
    # The key's digest (migration 0020), as key_hash spells it.
    digest = message["source_deduplication_key"]
    message["source_deduplication_key"] = None if digest is None else digest.hex
    owner = message_id if message["duplicate_of"] is None else message["duplicate_of"]
    telemetry = await conn.fetchrow(sql.MESSAGE_TELEMETRY, message_id, message["received_at"])
    dead = await conn.fetchrow(sql.MESSAGE_DEAD_LETTER, message_id)
    return {
        "message": message,
        "stages": [dict(r) for r in await conn.fetch(sql.MESSAGE_STAGE_LOGS, message_id)],
        "telemetry": dict(telemetry) if telemetry else None,
        "duplicates": [dict(r) for r in await conn.fetch(sql.MESSAGE_DUPLICATES, owner)]
        if message["duplicate_of"] is None else [],
        "dead_letter": _dead_letter(dict(dead)) if dead else None,
        "corrections": [dict(r) for r in await conn.fetch(sql.MESSAGE_CORRECTIONS, message_id)]
        if telemetry else [],
    }


async def _from_archive(settings: Settings, ident: str, message_id: int | None
                        ) -> dict[str, Any] | None:
    """:func:`_gather` on a connection where the archived rows are back (``None``: no archive
    holds the envelope)."""
    store = ObjectStore(settings.objects())
    key = None if ident.isdigit() else ident
    async with restored(settings.postgres(), store, message_id=message_id, key=key) as found:
        if found is None:
            return None
        out = await _gather(found.conn, found.message_id)
        if out is not None:
            out["archive"] = found.archives
        return out


async def explain(settings: Settings, ident: str, *, tenant: str | None = None,
                  pool: Any = None) -> dict[str, Any]:
    """Everything about one envelope (see the module docstring); with ``tenant``, an envelope
    of another tenant is not found, like one that does not exist. ``pool``: a Postgres pool
    the caller keeps (the API's); without it a pool of one connection is opened and closed."""
    resources = (Resources.around(settings, pool) if pool is not None else
                 await Resources.open(settings, name="tideway-messages", pool_size=1, nats=False))
    try:
        async with resources.pool.acquire() as conn:
            message_id = await find_id(conn, ident)
            out = None if message_id is None else await _gather(conn, message_id)
            # Gone from Postgres, or its stage logs gone (they expire first): the archive's.
            look = (out is None or not out["stages"]) and await any_archive(conn)
        if look:
            out = await _from_archive(resources.settings, ident, message_id) or out
        if out is None:
            raise NotFoundError(f"no envelope with id or dedupe key {ident!r} (a key is "
                                "forgotten once its dedupe generation is dropped)")
        message, telemetry, dead = out["message"], out["telemetry"], out["dead_letter"]
        # A malformed envelope has no tenant row; its dead letter names the subject's tenant.
        owner_tenant = message["tenant"] or (dead["tenant"] if dead else None)
        if tenant is not None and owner_tenant != tenant:
            raise NotFoundError(f"no envelope with id {message['id']}")
        if telemetry is not None and message["status"] == "completed":
            out["published"] = await _published(resources, message, telemetry)
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
        # The entry names its envelope by key (or, when it was put back from Postgres, by the
        # key's digest: pipeline._newest_kept); the row holds the digest.
        held = current.get("message_key")
        digest = message["source_deduplication_key"]
        out["hot_state_current"] = held is not None and digest == digest_of(held)
        out["hot_state_seq"] = current.get("seq")
    except Exception as exc:  # an explanation must not fail because Redis is away
        out["hot_state_current"] = f"unavailable: {exc}"
    try:
        analytics = Analytics(resources.clickhouse, resources.names.analytics_table)
        out["analytics_rows"] = await analytics.count_for(
            message["source_deduplication_key"], tenant=message["tenant"],
            device=message["device"], measured_at=telemetry["measured_at"])
    except TidewayError as exc:  # a chDB engine held by another process, for instance
        out["analytics_rows"] = f"unavailable: {exc.describe()}"
    except Exception as exc:
        out["analytics_rows"] = f"unavailable: {exc}"
    return out
