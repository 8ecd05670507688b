"""ClickHouse retention: a TTL on the analytics table, and its partitions in the plan.

The analytics values table (:mod:`streams.ingest.analytics`) is ``PARTITION BY
toYYYYMM(measured_at)``: a month of measurements per partition. Monthly, not daily, because
the partition key is the *device's* time: a backfill of a device's buffer can span many days in
one insert, and ClickHouse makes one part per partition an insert touches (and refuses an insert
touching more than ``max_partitions_per_insert_block``, 100) — a hundred days would fail an
insert, a hundred months does not happen. Twelve partitions a year also keep the part count
low, and range queries over measurement time still prune whole months.

The TTL counts from ``received_at`` (when Tideway got the envelope), like the Postgres tiers,
so that a backfill of old measurements or a device whose clock is years off is not dropped on
arrival: ``TTL toDateTime(received_at) + toIntervalSecond(retention.clickhouse_telemetry_s)``
with ``ttl_only_drop_parts = 1``. ClickHouse then drops a part whole once every row in it has
expired (parts never span partitions, and live data arrives in measurement order, so a month's
parts go together about one month after the retention), instead of rewriting parts in TTL merges
to cut out expired rows — which on a big table would rewrite the oldest month every few hours.
So rows live at least the retention and, for live data, at most about a month longer.

:func:`ensure_ttl` applies the TTL to the table whatever its age: ``tideway streams init``
(and ``tideway up``) call it after creating the table, so an existing deployment gets it too.
It is idempotent (it reads the table's current TTL and settings and alters only what differs;
changing the setting changes the TTL). ``MODIFY TTL`` recalculates the TTL bounds of the
existing parts once (with ``materialize_ttl_recalculate_only = 1`` that reads ``received_at``
and rewrites nothing; a mutation, in the background on a server).

The session tables (``session_<dataset>``, :mod:`streams.sessions.materialise`) have no TTL:
their rows belong to a run and go with it (:mod:`streams.retention.batch`).
"""

from __future__ import annotations

from datetime import UTC

from streams.clickhouse import ClickHouse, ident
from streams.retention.plan import KEEP, PlanItem

CLICKHOUSE_TELEMETRY = "clickhouse_telemetry"


def ttl_expression(seconds: float) -> str:
    """The TTL clause's expression, as ClickHouse prints it back (``SHOW CREATE TABLE``)."""
    return f"toDateTime(received_at) + toIntervalSecond({int(seconds)})"


# ``ttl_only_drop_parts``: expired parts are dropped whole, never rewritten (module docstring).
# ``materialize_ttl_recalculate_only``: when the TTL changes (``MODIFY TTL``), existing parts
# only get their TTL bounds recalculated (reading ``received_at``), not rewritten.
TABLE_SETTINGS = ("ttl_only_drop_parts = 1", "materialize_ttl_recalculate_only = 1")


def _squeeze(text: str) -> str:
    return "".join(text.split())


async def _current(ch: ClickHouse, table: str) -> tuple[str | None, str]:
    """The table's TTL expression (``None``: none) and its engine clause."""
    rows = await ch.query_rows(
        "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": ch.database, "t": table},
    )
    if not rows:
        raise LookupError(f"no ClickHouse table {ch.database}.{table}")
    engine = str(rows[0][0])
    ttl = None
    if " TTL " in engine:
        ttl = engine.split(" TTL ", 1)[1].split(" SETTINGS ", 1)[0].strip()
    return ttl, engine


async def ensure_ttl(ch: ClickHouse, table: str, seconds: float) -> list[str]:
    """Give ``table`` the TTL of ``seconds`` (module docstring); returns the statements it ran
    (none when the table already had it). Settings first, so that the TTL's recalculation over
    the existing parts is the cheap one."""
    table = ident(table)
    ttl, engine = await _current(ch, table)
    done = []
    missing = [s for s in TABLE_SETTINGS if s not in engine]
    if missing:
        done.append(f"ALTER TABLE {ch.database}.{table} MODIFY SETTING {', '.join(missing)}")
    # Compared without spaces: a server may print the expression back spaced otherwise, and
    # re-applying an unchanged TTL at every start would recalculate every part each time.
    if ttl is None or _squeeze(ttl) != _squeeze(ttl_expression(seconds)):
        done.append(f"ALTER TABLE {ch.database}.{table} MODIFY TTL {ttl_expression(seconds)}")
    for statement in done:
        await ch.command(statement)
    return done


async def partition_items(ch: ClickHouse, table: str) -> list[PlanItem]:
    """One ``keep`` item per partition of ``table``: its size, rows, and when ClickHouse drops
    its last part (the newest ``received_at`` in it plus the TTL). ClickHouse drops expired
    parts itself (each part knows its TTL bounds, ``delete_ttl_info_max``); a retention run
    has nothing to do here."""
    rows = await ch.query_rows(
        "SELECT partition, sum(bytes_on_disk), sum(rows), max(delete_ttl_info_max) "
        "FROM system.parts WHERE database = {db:String} AND table = {t:String} AND active "
        "AND rows > 0 GROUP BY partition ORDER BY partition",
        {"db": ch.database, "t": ident(table)},
    )
    items = []  # (a part whose rows all expired stays active, empty, until cleaned up)
    for partition, size, count, ttl_max in rows:
        expires = ttl_max.replace(tzinfo=UTC) if ttl_max and ttl_max.year > 1970 else None
        items.append(
            PlanItem(
                tier=CLICKHOUSE_TELEMETRY,
                target=f"{ch.database}.{table} partition {partition}",
                expires_at=expires,
                action=KEEP,
                bytes=int(size),
                rows=int(count),
            )
        )
    return items
