"""The retention plan: what exists, when it expires, and what a run does with it.

Pure: the partitions and dedupe generations Postgres holds, the settings and ``now`` go in; a
list of :class:`PlanItem` comes out (``tideway retention show`` prints it, ``run`` carries out
its ``drop`` and ``delete`` items). Each tier is one kind of stored thing with one retention
setting; another tier (the batch half's datasets and artifacts, say) adds its own items to
the same list.

A time partition ``[lo, hi)`` expires at ``hi + retention``: only then is every row in it older
than the retention. A dedupe generation's keys were all written before the next generation
started (the generation barrier), so generation ``g`` expires at ``started_at(g + 1) +
dedupe_keys_s``; the current generation never expires.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streams.config import RetentionSettings

KEEP = "keep"
DROP = "drop"
DELETE = "delete"


@dataclass(frozen=True, kw_only=True, slots=True)
class Tier:
    """One partitioned table and the retention setting that governs it."""

    name: str
    table: str
    column: str
    """The partition key (a time, or ``gen`` for the dedupe keys)."""
    setting: str
    """The field of :class:`RetentionSettings` holding its retention (seconds)."""
    keep_open_dead_letters: str | None = None
    """The column naming a message id, when the rows of open dead letters must survive."""
    kept_rows: str = "true"
    """What every row an open dead letter needs satisfies (a partial index's predicate): the
    put-back before a drop finds them through that index."""


TIERS = (
    Tier(
        name="stage_logs",
        table="ingestion_stage_passes",
        column="created_at",
        setting="stage_logs_s",
    ),
    Tier(
        name="ingestion_records",
        table="ingestion_messages",
        column="received_at",
        setting="ingestion_records_s",
        keep_open_dead_letters="id",
    ),
    Tier(
        name="telemetry_logs",
        table="device_telemetry_logs",
        column="received_at",
        setting="telemetry_logs_s",
        keep_open_dead_letters="ingestion_message_id",
        # A dead letter's telemetry is never processed (a redrive that publishes it resolves
        # the dead letter); ix_device_telemetry_logs_unprocessed holds those rows (0020).
        kept_rows="processing_state <> 'processed'",
    ),
)
DEDUPE = Tier(name="dedupe_keys", table="ingest_dedupe_keys", column="gen", setting="dedupe_keys_s")
DEAD_LETTERS = "dead_letters"
TIER_OF = {tier.table: tier for tier in (*TIERS, DEDUPE)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Partition:
    """One partition as the catalogue describes it."""

    parent: str
    name: str
    lo: datetime | int | None
    """Lower bound (inclusive); ``None`` for the DEFAULT partition."""
    hi: datetime | int | None
    """Upper bound (exclusive); ``None`` for the DEFAULT partition."""
    bytes: int
    expired_rows: int = 0
    """DEFAULT partitions only: rows older than the retention (a run deletes them, except
    the rows of open dead letters)."""

    @property
    def is_default(self) -> bool:
        return self.lo is None


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanItem:
    """One stored thing, when it expires, and what a run does with it now."""

    tier: str
    target: str
    expires_at: datetime | None
    """``None``: never, as things stand (the current dedupe generation, a DEFAULT partition,
    open dead letters)."""
    action: str
    """``keep``, ``drop`` (a whole partition) or ``delete`` (rows of a small table)."""
    bytes: int
    rows: int | None = None
    archive_to: str | None = None
    """The object key the partition is exported to before it is dropped, when its tier is
    archived (``retention.archive``; :mod:`streams.retention.archive`)."""


def retention_of(settings: RetentionSettings, tier: Tier) -> timedelta:
    return timedelta(seconds=float(getattr(settings, tier.setting)))


def plan(
    partitions: Sequence[Partition],
    generations: Sequence[tuple[int, datetime]],
    settings: RetentionSettings,
    now: datetime,
    *,
    resolved_dead_letters: tuple[int, int] = (0, 0),
) -> list[PlanItem]:
    """The retention plan (module docstring). ``generations`` are ``(gen, started_at)``;
    ``resolved_dead_letters`` is (rows, bytes) of resolved dead letters past their
    retention."""
    started = dict(generations)
    items: list[PlanItem] = []
    for part in partitions:
        tier = TIER_OF[part.parent]
        keep_for = retention_of(settings, tier)
        expires: datetime | None
        if part.is_default:
            action = DELETE if part.expired_rows else KEEP
            items.append(
                PlanItem(
                    tier=tier.name,
                    target=part.name,
                    expires_at=None,
                    action=action,
                    bytes=part.bytes,
                    rows=part.expired_rows or None,
                )
            )
            continue
        if tier is DEDUPE:
            assert isinstance(part.lo, int)
            following = started.get(part.lo + 1)
            expires = None if following is None else following + keep_for
        else:
            assert isinstance(part.hi, datetime)
            expires = part.hi + keep_for
        action = DROP if expires is not None and expires <= now else KEEP
        items.append(
            PlanItem(
                tier=tier.name,
                target=part.name,
                expires_at=expires,
                action=action,
                bytes=part.bytes,
            )
        )
    rows, size = resolved_dead_letters
    if rows:
        items.append(
            PlanItem(
                tier=DEAD_LETTERS,
                target="dead_letters (resolved)",
                expires_at=now,
                action=DELETE,
                bytes=size,
                rows=rows,
            )
        )
    order = {
        name: i for i, name in enumerate([t.name for t in TIERS] + [DEDUPE.name, DEAD_LETTERS])
    }
    items.sort(key=lambda i: (order.get(i.tier, len(order)), i.tier, i.target))
    return items


# -- partitions ahead ---------------------------------------------------------------------------


def bucket_start(at: datetime, grain_s: float) -> datetime:
    """The start of the partition bucket holding ``at`` (buckets are aligned to the epoch)."""
    seconds = at.timestamp()
    return datetime.fromtimestamp(seconds - seconds % grain_s, UTC)


def partition_name(table: str, lo: datetime, grain_s: float) -> str:
    """``<table>_pYYYYMMDD`` for whole days, else down to the second."""
    stamp = lo.strftime("%Y%m%d") if grain_s % 86400 == 0 else lo.strftime("%Y%m%d_%H%M%S")
    return f"{table}_p{stamp}"


def buckets_ahead(
    table: str, existing: Sequence[Partition], now: datetime, grain_s: float, ahead: int
) -> list[tuple[str, datetime, datetime]]:
    """(name, lo, hi) of the buckets from ``now``'s to ``ahead`` more that no existing
    partition of ``table`` overlaps (a partition made with another grain is left alone)."""
    grain = timedelta(seconds=grain_s)
    spans = [
        (p.lo, p.hi)
        for p in existing
        if p.parent == table and isinstance(p.lo, datetime) and isinstance(p.hi, datetime)
    ]
    first = bucket_start(now, grain_s)
    out = []
    for n in range(ahead + 1):
        lo = first + n * grain
        hi = lo + grain
        if not any(a < hi and lo < b for a, b in spans):
            out.append((partition_name(table, lo, grain_s), lo, hi))
    return out


def generation_due(current_started: datetime, now: datetime, grain_s: float) -> bool:
    """Whether the current dedupe generation belongs to an earlier bucket than ``now``."""
    return bucket_start(current_started, grain_s) < bucket_start(now, grain_s)
