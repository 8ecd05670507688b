"""Archive before drop against real Postgres, NATS and the local object store: an expired
partition goes to Parquet (verified, recorded) and only then is dropped; the Parquet holds
exactly the partition's rows; ``messages show`` explains an archived envelope as before the
drop; an export that cannot be written leaves the partition in place."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pyarrow.parquet as pq

from stages.ingest.ingress import key_hash
from streams.config import RetentionSettings, Settings
from streams.ingest.messages import explain
from streams.ingest.provision import provision
from streams.objects import ObjectStore
from streams.observability.metrics import Metrics
from streams.observability.observers import RetentionMetrics
from streams.retention import maintain
from streams.retention.plan import DROP
from streams.retention.restore import restored
from tests.integration.ingest.conftest import Harness, good_values

DAY = timedelta(days=1)
TABLES = ("ingestion_messages", "ingestion_stage_passes", "device_telemetry_logs")
ALL_TIERS = ("stage_logs", "ingestion_records", "telemetry_logs")


def _archiving(settings: Settings, **changes: Any) -> Settings:
    """Every tier archived, every retention a day or two (so a round three days on drops
    today), and a dedupe generation a day (so a round two days later forgets today's keys)."""
    retention = RetentionSettings(
        stage_logs_s=86400,
        ingestion_records_s=2 * 86400,  # >= dedupe horizon + generation (a key names its row)
        telemetry_logs_s=86400,
        dedupe_keys_s=86400,
        dedupe_generation_s=86400,
        archive=ALL_TIERS,
        archive_batch_rows=100,  # several row groups from a few hundred rows
    )
    return settings.model_copy(update={"retention": retention, **changes})


async def _partition_of(conn: asyncpg.Connection, table: str, column: str, value: Any) -> str:
    # ``column`` holds one value, or (``[]`` appended) an array holding it.
    where = f"$1 = ANY({column[:-2]})" if column.endswith("[]") else f"{column} = $1"
    return str(
        await conn.fetchval(f"SELECT tableoid::regclass::text FROM {table} WHERE {where}", value)
    )


def _normal(value: Any, pg_type: str) -> Any:
    """A value as asyncpg returns it, or as the archive holds it, in one comparable form."""
    if value is None:
        return None
    if pg_type in ("json", "jsonb"):
        return orjson.dumps(
            orjson.loads(value) if isinstance(value, str) else value, option=orjson.OPT_SORT_KEYS
        )
    if pg_type == "uuid":
        return str(value)
    if isinstance(value, list):
        return tuple(value)
    return value


async def _pg_rows(conn: asyncpg.Connection, partition: str, types: dict[str, str]) -> list[Any]:
    """The partition's rows; the types Arrow has no form for read as their Postgres text (what
    the archive promises to hold for them)."""

    def select(name: str, pg_type: str) -> str:
        if pg_type == "uuid[]":
            return f"{name}::text[]"
        if pg_type in ("uuid", "json", "jsonb", "interval", "mood") or pg_type.startswith(
            "numeric"
        ):
            return f"{name}::text"
        return name

    columns = ", ".join(select(n, t) for n, t in types.items())
    rows = await conn.fetch(f"SELECT {columns} FROM {partition}")
    return sorted(
        (tuple(_normal(r[i], t) for i, t in enumerate(types.values())) for r in rows), key=repr
    )


def _parquet_rows(path: Path) -> tuple[dict[str, str], list[Any]]:
    table = pq.read_table(path)
    types = {f.name: f.metadata[b"pg_type"].decode() for f in table.schema}
    rows = sorted(
        (tuple(_normal(r[name], types[name]) for name in types) for r in table.to_pylist()),
        key=repr,
    )
    return types, rows


def _same_explanation(before: dict[str, Any], after: dict[str, Any]) -> None:
    for part in ("message", "stages", "telemetry", "duplicates", "dead_letter", "published"):
        assert after.get(part) == before.get(part), part


async def test_an_expired_partition_is_archived_verified_recorded_then_dropped_and_explained(
    fleet: Harness,
) -> None:
    s = _archiving(fleet.settings)
    # JetStream absorbs a repeated Nats-Msg-Id within its window: shrink it so one reaches us.
    stream = s.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(s.model_copy(update={"stream": stream}))
    seqs = [
        await fleet.publish("d1", {"ts": 1, "seq": 1, "values": good_values()}, msg_id="a-1"),
        await fleet.publish("d1", {"ts": 2, "seq": 2, "values": good_values(temp=500.0)}),
    ]
    await fleet.consume(2, settings=s)
    await asyncio.sleep(0.3)
    seqs.append(
        await fleet.publish("d1", {"ts": 1, "seq": 1, "values": good_values()}, msg_id="a-1")
    )
    for i in range(200):  # enough rows for several row groups
        await fleet.publish("d2", {"ts": 10 + i, "seq": 10 + i, "values": good_values()})
    await fleet.consume(203, within=90, settings=s)
    owner = await fleet.message(seqs[0])
    invalid = await fleet.message(seqs[1])
    duplicate = await fleet.message(seqs[2])
    assert (owner["status"], invalid["status"], duplicate["status"]) == (
        "completed",
        "failed_validation",
        "duplicate",
    )
    before = {
        ident: await explain(s, ident)
        for ident in (str(owner["id"]), "m:acme:a-1", str(invalid["id"]), str(duplicate["id"]))
    }
    assert before[str(owner["id"])]["duplicates"] and before[str(owner["id"])]["stages"]

    # Every row of each table's partition, as Postgres holds it, before the round.
    async with fleet.pool.acquire() as conn:
        partitions = {
            "ingestion_messages": await _partition_of(
                conn, "ingestion_messages", "id", owner["id"]
            ),
            "ingestion_stage_passes": await _partition_of(
                conn, "ingestion_stage_passes", "message_ids[]", owner["id"]
            ),
            "device_telemetry_logs": await _partition_of(
                conn, "device_telemetry_logs", "ingestion_message_id", owner["id"]
            ),
        }
        types = {
            p: {
                r["attname"]: r["t"]
                for r in await conn.fetch(
                    "SELECT attname, format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                    "WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped "
                    "ORDER BY attnum",
                    p,
                )
            }
            for p in partitions.values()
        }
        held = {p: await _pg_rows(conn, p, types[p]) for p in partitions.values()}
    assert len(held[partitions["ingestion_messages"]]) == 203

    later = datetime.now(UTC) + 3 * DAY
    # A dry run names what it would archive, and changes nothing.
    dry = await maintain.maintain_once(fleet.pool, s, now=later, dry_run=True)
    assert dry is not None
    going = {i.target: i.archive_to for i in dry.done if i.action == DROP}
    for table, name in partitions.items():
        assert (
            going[name] == f"archive/{table}/day={name[-8:-4]}-{name[-4:-2]}-{name[-2:]}/"
            f"{name}.parquet"
        )
    async with fleet.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM retention_archives") == 0

    done = await maintain.maintain_once(fleet.pool, s, now=later)
    assert done is not None and not done.skipped, done.skipped
    assert set(partitions.values()) <= {i.target for i in done.done}
    assert ("ingestion_records", "archived", 203) in done.archives
    assert {outcome for _, outcome, _ in done.archives} == {"archived"}

    store_root = Path(s.objects())
    async with fleet.pool.acquire() as conn:
        for table, name in partitions.items():
            assert await conn.fetchval("SELECT to_regclass($1)", name) is None  # dropped
            rec = await conn.fetchrow(
                "SELECT * FROM retention_archives WHERE partition_name = $1", name
            )
            assert rec is not None and rec["parent_table"] == table
            assert rec["object_key"] == going[name]
            path = store_root / rec["object_key"]
            # The object is what the row says: its bytes, hash and rows.
            assert path.stat().st_size == rec["bytes"]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == rec["sha256"]
            assert pq.ParquetFile(path).metadata.num_rows == rec["rows"] == len(held[name])
            if table == "ingestion_messages":
                assert pq.ParquetFile(path).metadata.num_row_groups >= 3
            # ...and its rows are the partition's rows, column for column.
            archived_types, archived = _parquet_rows(path)
            assert archived_types == types[name]
            assert archived == held[name]
        # Nothing left under tmp/ by the exports.
        assert not list((store_root / "tmp").glob("*")) if (store_root / "tmp").exists() else True

    # The same explanations, from the archive.
    for ident, was in before.items():
        now = await explain(s, ident)
        _same_explanation(was, now)
        assert "ingestion_messages" in now["archive"], ident
    assert set((await explain(s, str(owner["id"])))["archive"]) == set(TABLES)

    # Once the key's dedupe generation is dropped too, the key is found in the archive.
    again = await maintain.maintain_once(fleet.pool, s, now=later + 2 * DAY)
    assert again is not None and not again.skipped, again.skipped
    async with fleet.pool.acquire() as conn:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM ingest_dedupe_keys WHERE message_id = $1", owner["id"]
            )
            == 0
        )
    _same_explanation(before["m:acme:a-1"], await explain(s, "m:acme:a-1"))


async def test_an_export_that_cannot_be_written_leaves_the_partition(
    fleet: Harness, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("the object store root is a file: nothing can be written under it")
    s = _archiving(fleet.settings, object_store=str(blocked))
    seq = await fleet.publish("d1", {"ts": 1, "values": good_values()}, msg_id="b-1")
    await fleet.consume(1, settings=s)
    message = await fleet.message(seq)
    async with fleet.pool.acquire() as conn:
        name = await _partition_of(conn, "ingestion_messages", "id", message["id"])
        rows = await conn.fetchval(f"SELECT count(*) FROM {name}")

    done = await maintain.maintain_once(fleet.pool, s, now=datetime.now(UTC) + 3 * DAY)
    assert done is not None
    why = dict(done.skipped)
    assert why[name].startswith("archive failed, partition kept: STORAGE_UNAVAILABLE"), why
    assert name not in {i.target for i in done.done}
    assert ("ingestion_records", "failed", 0) in done.archives  # what the leader meters
    metrics = Metrics(process=False)
    for tier, outcome, count in done.archives:
        RetentionMetrics(metrics).on_archive(tier=tier, outcome=outcome, rows=count)
    failed = metrics.registry.get_sample_value(
        "tideway_retention_archives_total", {"tier": "ingestion_records", "outcome": "failed"}
    )
    assert failed == sum(1 for a in done.archives if a[:2] == ("ingestion_records", "failed"))
    async with fleet.pool.acquire() as conn:
        assert await conn.fetchval("SELECT to_regclass($1)", name) is not None
        assert await conn.fetchval(f"SELECT count(*) FROM {name}") == rows
        assert await _partition_of(conn, "ingestion_messages", "id", message["id"]) == name
        assert await conn.fetchval("SELECT count(*) FROM retention_archives") == 0
    assert (await explain(s, str(message["id"])))["message"]["status"] == "completed"

    # With the store writable again, the next round archives and drops it.
    ok = _archiving(fleet.settings)
    again = await maintain.maintain_once(fleet.pool, ok, now=datetime.now(UTC) + 3 * DAY)
    assert again is not None and not again.skipped, again.skipped
    async with fleet.pool.acquire() as conn:
        assert await conn.fetchval("SELECT to_regclass($1)", name) is None
        assert (
            await conn.fetchval(
                "SELECT rows FROM retention_archives WHERE partition_name = $1", name
            )
            == rows
        )


async def test_an_object_no_row_records_is_replaced_not_trusted(fleet: Harness) -> None:
    """A commit that failed after the promotion leaves an object at the key with no row: the
    next attempt removes it and exports again (it would otherwise refuse the key)."""
    s = _archiving(fleet.settings)
    seq = await fleet.publish("d1", {"ts": 1, "values": good_values()}, msg_id="c-1")
    await fleet.consume(1, settings=s)
    message = await fleet.message(seq)
    later = datetime.now(UTC) + 3 * DAY
    dry = await maintain.maintain_once(fleet.pool, s, now=later, dry_run=True)
    assert dry is not None
    async with fleet.pool.acquire() as conn:
        name = await _partition_of(conn, "ingestion_messages", "id", message["id"])
    key = next(i.archive_to for i in dry.done if i.target == name)
    assert key is not None
    store = ObjectStore(s.objects())
    store.put(key, b"left over by an attempt whose commit failed " + uuid.uuid4().bytes)

    done = await maintain.maintain_once(fleet.pool, s, now=later)
    assert done is not None and not done.skipped, done.skipped
    async with fleet.pool.acquire() as conn:
        rec = await conn.fetchrow("SELECT * FROM retention_archives WHERE object_key = $1", key)
    assert rec is not None and rec["rows"] == 1
    assert pq.ParquetFile(Path(s.objects()) / key).metadata.num_rows == 1
    explained = await explain(s, str(message["id"]))
    assert explained["message"]["status"] == "completed"
    assert explained["archive"]["ingestion_messages"] == [key]


async def test_whatever_the_columns_the_archive_holds_them_and_restores_them(
    settings: Settings, pg_pool: asyncpg.Pool
) -> None:
    """Columns of types the layout does not use today (another change may add them) go to
    Parquet and come back as they were."""
    s = _archiving(
        settings,
        retention=RetentionSettings(
            ingestion_records_s=86400, dedupe_keys_s=86400, archive=("ingestion_records",)
        ),
    )
    t0 = datetime(2030, 3, 10, 12, 0, tzinfo=UTC)
    assert await maintain.maintain_once(pg_pool, s, now=t0) is not None
    async with pg_pool.acquire() as conn:
        await conn.execute("CREATE TYPE mood AS ENUM ('calm', 'stormy')")
        await conn.execute(
            "ALTER TABLE ingestion_messages ADD COLUMN digest bytea, ADD COLUMN codes smallint[],"
            " ADD COLUMN ratio numeric(12, 4), ADD COLUMN peers uuid[], ADD COLUMN doc jsonb,"
            " ADD COLUMN mood mood, ADD COLUMN span interval, ADD COLUMN day date"
        )
        ids = [
            await conn.fetchval(
                "INSERT INTO ingestion_messages (source_deduplication_key, stream_seq,"
                " received_at, subject, payload_bytes, status, digest, codes, ratio, peers,"
                " doc, mood, span, day) VALUES ($1, $2, $3, 's', 1, 'completed', $4, $5,"
                " $6::numeric, $7, $8, $9, $10, $11) RETURNING id",
                uuid.UUID(key_hash(f"k-{i}")),  # rows keep the key's digest (0020)
                i,
                t0 + timedelta(minutes=i),
                bytes([i, 0, 255]),
                [i, -1],
                f"{i}.1250",
                [uuid.uuid4(), uuid.uuid4()],
                {"n": i, "list": [1, "x", None]},
                "stormy" if i % 2 else "calm",
                timedelta(hours=i, microseconds=7),
                (t0 + timedelta(days=i)).date(),
            )
            for i in range(5)
        ]
        nulls = await conn.fetchval(
            "INSERT INTO ingestion_messages (source_deduplication_key, stream_seq, received_at,"
            " subject, payload_bytes, status) VALUES ($2, 99, $1, 's', 1, 'completed')"
            " RETURNING id",
            t0, uuid.UUID(key_hash("k-null")),
        )
        name = await _partition_of(conn, "ingestion_messages", "id", ids[0])
        before = {
            i: dict(await conn.fetchrow("SELECT * FROM ingestion_messages WHERE id = $1", i))
            for i in [*ids, nulls]
        }
        types = {
            r["attname"]: r["t"]
            for r in await conn.fetch(
                "SELECT attname, format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                "WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum",
                name,
            )
        }
        held = await _pg_rows(conn, name, types)

    done = await maintain.maintain_once(pg_pool, s, now=t0 + 5 * DAY)
    assert done is not None and not done.skipped, done.skipped
    async with pg_pool.acquire() as conn:
        key = await conn.fetchval(
            "SELECT object_key FROM retention_archives WHERE partition_name = $1", name
        )
        assert await conn.fetchval("SELECT to_regclass($1)", name) is None
    path = Path(s.objects()) / key
    archived_types, archived = _parquet_rows(path)
    assert archived_types == types
    assert archived == held
    arrow = pq.read_schema(path)
    assert str(arrow.field("digest").type) == "binary"
    assert str(arrow.field("codes").type) == "list<element: int16>"
    assert str(arrow.field("received_at").type) == "timestamp[us, tz=UTC]"

    store = ObjectStore(s.objects())
    for message_id, row in before.items():
        async with restored(s.postgres(), store, message_id=message_id) as found:
            assert found is not None and found.archives == {"ingestion_messages": [key]}
            again = await found.conn.fetchrow(
                "SELECT * FROM ingestion_messages WHERE id = $1", message_id
            )
        assert dict(again) == row


async def test_an_archive_is_removed_once_its_own_retention_has_passed(fleet: Harness) -> None:
    """``retention.archives_s`` (5 days here, the tiers 1 or 2): a round three days on archives
    and drops the partitions that expired (today's and the empty ones made ahead); a later
    round removes exactly the archives whose partition ended 5 days before it, object and
    row, and keeps the others; a dry run removes nothing."""
    keep = timedelta(days=5)
    s = _archiving(fleet.settings)
    s = s.model_copy(
        update={"retention": s.retention.model_copy(update={"archives_s": keep.total_seconds()})}
    )
    seq = await fleet.publish("d1", {"ts": 1, "values": good_values()}, msg_id="e-1")
    await fleet.consume(1, settings=s)
    message = await fleet.message(seq)
    now = datetime.now(UTC)
    done = await maintain.maintain_once(fleet.pool, s, now=now + 3 * DAY)
    assert done is not None and not done.skipped, done.skipped
    assert not [i for i in done.done if i.tier == "archives"]
    store = ObjectStore(s.objects())

    async def archives() -> dict[str, datetime]:
        async with fleet.pool.acquire() as conn:
            rows = await conn.fetch("SELECT object_key, range_hi FROM retention_archives")
        return {r["object_key"]: r["range_hi"] for r in rows}

    made = await archives()
    assert made and all(store.exists(k) for k in made)
    assert (await explain(s, str(message["id"])))["message"]["status"] == "completed"

    later = now + 6 * DAY
    due = {k for k, hi in made.items() if hi + keep <= later}
    assert due and due != set(made)  # today's partitions expire, those made ahead not yet
    dry = await maintain.maintain_once(fleet.pool, s, now=later, dry_run=True)
    assert dry is not None
    assert {i.target for i in dry.done if i.tier == "archives"} == due
    assert all(store.exists(k) for k in made)  # a dry run removes nothing

    late = await maintain.maintain_once(fleet.pool, s, now=later)
    assert late is not None and not late.skipped, late.skipped
    assert {i.target for i in late.done if i.tier == "archives"} == due
    left = await archives()
    assert not due & left.keys() and not any(store.exists(k) for k in due)
    assert set(made) - due <= left.keys() and all(store.exists(k) for k in set(made) - due)


async def test_expired_rows_of_a_default_partition_are_archived_before_they_are_deleted(
    fleet: Harness,
) -> None:
    """Rows in DEFAULT (a time no partition covers: an old replay, the rows of a dead letter
    kept past their partition) go row by row; with their tier archived they are exported,
    verified and recorded first, in the same transaction, and a message is explained from
    that archive."""
    s = _archiving(fleet.settings)
    seq = await fleet.publish("d1", {"ts": 1, "seq": 1, "values": good_values()}, msg_id="f-1")
    await fleet.consume(1, settings=s)
    message = await fleet.message(seq)
    old = timedelta(days=400)  # before every partition: the rows move to DEFAULT
    async with fleet.pool.acquire() as conn:
        for table, column, where in (
            ("ingestion_messages", "received_at", "id = $1"),
            ("device_telemetry_logs", "received_at", "ingestion_message_id = $1"),
            ("ingestion_stage_passes", "created_at", "$1 = ANY(message_ids)"),
        ):
            await conn.execute(f"UPDATE {table} SET {column} = {column} - $2::interval"
                               f" WHERE {where}", message["id"], old)
        for table in TABLES:
            assert await _partition_of(
                conn, table, "message_ids[]" if table == "ingestion_stage_passes"
                else "id" if table == "ingestion_messages" else "ingestion_message_id",
                message["id"],
            ) == f"{table}_default"
    before = await explain(s, str(message["id"]))

    done = await maintain.maintain_once(fleet.pool, s, now=datetime.now(UTC))
    assert done is not None and not done.skipped, done.skipped
    assert sorted(a[:2] for a in done.archives) == [
        (tier, "archived") for tier in sorted(ALL_TIERS)
    ]
    async with fleet.pool.acquire() as conn:
        for table in TABLES:
            assert await conn.fetchval(f"SELECT count(*) FROM {table}_default") == 0
        recorded = await conn.fetch(
            "SELECT partition_name, object_key, rows FROM retention_archives ORDER BY 1"
        )
    assert [(r["partition_name"], r["rows"]) for r in recorded] == [
        (f"{t}_default", 1) for t in sorted(TABLES)
    ]
    assert all(r["object_key"].startswith("archive/") and "/default/" in r["object_key"]
               for r in recorded)
    after = await explain(s, str(message["id"]))
    assert after["message"]["status"] == "completed"
    assert after["stages"] == before["stages"] and after["telemetry"] == before["telemetry"]
    assert sorted(after["archive"]) == sorted(TABLES)
