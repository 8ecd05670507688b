"""Retention's own records: the Parquet archives of dropped partitions.

One ``retention_archives`` row per expired partition that retention exported to the object
store before dropping it (``streams.retention.archive``; migration ``0018``). The row is
written in the transaction that drops the partition, so a partition is either still in
Postgres or recorded here with a verified object.
"""

from __future__ import annotations

import sqlalchemy as sa

from schemas.tables.base import metadata

_TS = sa.DateTime(timezone=True)

retention_archives = sa.Table(
    "retention_archives",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
    # The retention tier and table the partition belonged to, and its name and time range.
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("parent_table", sa.Text, nullable=False),
    sa.Column("partition_name", sa.Text, nullable=False),
    sa.Column("range_lo", _TS, nullable=False),
    sa.Column("range_hi", _TS, nullable=False),
    # The object: its key under the store's root, sha256 (hex) of its bytes, size and rows.
    sa.Column("object_key", sa.Text, nullable=False, unique=True),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    # The range of message ids in it (ingestion_messages.id, or the column naming it), so a
    # message is looked for only in the objects that can hold it; NULL: no such column/rows.
    sa.Column("message_id_min", sa.BigInteger),
    sa.Column("message_id_max", sa.BigInteger),
    sa.Column("archived_at", _TS, nullable=False, server_default=sa.func.now()),
    sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
    sa.CheckConstraint("bytes >= 0 AND rows >= 0", name="sizes"),
    sa.CheckConstraint("range_lo < range_hi", name="range"),
    sa.Index("ix_retention_archives_lookup", "parent_table", "range_lo"),
)
