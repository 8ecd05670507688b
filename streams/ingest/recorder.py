"""Postgres for the streaming pipeline: the dedupe read and the recording transaction.

``lookup`` is one statement. ``record`` is one transaction: insert the new envelopes' rows
with their final statuses and their dedupe keys, ``COPY`` their telemetry rows and stage
logs, insert duplicate rows and dead letters. A key that another consumer recorded between
the lookup and the insert (a race the primary key of ``ingest_dedupe_keys`` settles within a
dedupe generation, and the generation barrier across two: ``sql.WRITE_BARRIER``) is re-read
and recorded as a duplicate — or recognised as this very message, recorded concurrently by a
redelivery.

Errors are translated by :func:`streams.adapters.errors.translate_pg`. A row Postgres refuses
(a data, constraint or limit error: ``PermanentError``) makes :meth:`record_safely` split the
batch in halves until the poison envelope is alone, and that one is recorded as
``failed_terminal`` / ``PERSIST_REJECTED`` with a dead letter, so it cannot hold its batch.
Every other failure (connection lost, lock timeout, missing table…) is a ``TransientError``:
the batch is redelivered later. A refusal is recorded by the names Postgres gives (constraint,
table, column) and its SQLSTATE, never its message, which quotes the value refused.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas.error_codes import PERSIST_REJECTED
from stages.ingest.evaluate import Evaluation, StageLog
from stages.ingest.plan import (
    Classified,
    Existing,
    Fate,
    Final,
    Recording,
    classify,
    value_layout,
)
from stages.ingest.status import Status
from streams.adapters.errors import PG_FAILURES, PgUniqueViolation, translate_pg
from streams.adapters.postgres import Conn, Pool
from streams.errors import PermanentError
from streams.ingest import sql
from streams.ingest.layouts import ValueLayouts
from streams.observability import tracing


async def lookup(conn: Conn, evaluations: Sequence[Evaluation]) -> tuple[list[Existing], int]:
    """The rows already holding the batch's keys, duplicate rows holding its receipts, and
    the dedupe generation the read saw."""
    try:
        rows = await conn.fetch(
            sql.LOOKUP,
            "\n".join([ev.key_digest for ev in evaluations]),
            "\n".join([f"{ev.receipt.stream_seq}:{ev.receipt.received_at_ns // 1000}"
                       for ev in evaluations]),
        )
    except PG_FAILURES as exc:
        raise translate_pg(exc) from exc
    gen = next(r["gen"] for r in rows if r["id"] is None)
    return [
        Existing(id=r["id"], key=None if r["key"] is None else r["key"].hex,
                 stream_seq=r["stream_seq"],
                 received_at=r["received_at"], status=r["status"])
        for r in rows if r["id"] is not None
    ], gen


@dataclass(kw_only=True)
class Recorded:
    """What a recording transaction did."""

    statuses: dict[int, Status] = field(default_factory=dict)
    """Batch index → status recorded for it (new rows and duplicate rows)."""
    message_ids: dict[int, int] = field(default_factory=dict)
    """Batch index → the ``ingestion_messages`` id now holding its status."""
    contended: set[int] = field(default_factory=set)
    """Batch indexes that could not be recorded now (nak and retry)."""
    dead_letters: list[tuple[int, Evaluation, str]] = field(default_factory=list)
    """(message id, evaluation, reason code) of every dead letter written."""
    refused: set[int] = field(default_factory=set)
    """Batch indexes whose rows Postgres refused (recorded as ``PERSIST_REJECTED``)."""


class Recorder:
    """Writes batches to Postgres."""

    def __init__(self, pool: Pool, *, capture: bool, namespace: str = "") -> None:
        self.pool = pool
        self.capture = capture
        self.layouts = ValueLayouts()
        self.prefix = f"{namespace}." if namespace else ""
        self.prefix_id: int | None = None
        """The prefix's id in ``ingest_subject_prefixes``, once registered."""

    async def record_safely(
        self, evaluations: Sequence[Evaluation], fates: Sequence[Classified],
        finals: Mapping[int, Final], *, gen: int | None = None,
    ) -> Recorded:
        """:meth:`record`, isolating a poison envelope by bisection (module docstring)."""
        try:
            return await self.record(evaluations, fates, finals, gen=gen)
        except PermanentError as exc:
            indexes = sorted(set(finals) | {i for i, f in enumerate(fates)
                                            if f.fate is Fate.DUPLICATE})
            if len(indexes) <= 1:
                if not finals:
                    raise
                (index,) = finals
                alone = await self.record(evaluations, fates,
                                          {index: _rejected(finals[index], exc)}, gen=gen)
                alone.refused.add(index)
                return alone
            half = len(indexes) // 2
            out = Recorded()
            for part in (indexes[:half], indexes[half:]):
                keep = set(part)
                sub_fates = [f if i in keep else Classified(fate=Fate.RECORDED)
                             for i, f in enumerate(fates)]
                result = await self.record_safely(
                    evaluations, sub_fates, {i: finals[i] for i in part if i in finals},
                    gen=gen,
                )
                out.statuses.update(result.statuses)
                out.message_ids.update(result.message_ids)
                out.contended |= result.contended
                out.dead_letters += result.dead_letters
                out.refused |= result.refused
            return out

    async def record(
        self, evaluations: Sequence[Evaluation], fates: Sequence[Classified],
        finals: Mapping[int, Final], *, gen: int | None = None,
    ) -> Recorded:
        """Record the batch in one transaction (see the module docstring).

        ``gen`` is the dedupe generation the batch's lookup saw. The fast path reserves ids
        and ``COPY``s the new rows and their keys; it is taken only when the transaction
        writes into that same generation. If another consumer recorded one of the keys since
        the lookup, the primary key of ``ingest_dedupe_keys`` refuses the ``COPY`` and the
        batch is recorded again on the careful path (``CLAIM_KEYS``), which also sees the
        keys of every older generation: a lookup made before a generation change cannot
        have missed a key recorded just before it (migration 0012's barrier).
        """
        # The telemetry layouts and the subject prefix are registered before the transaction
        # (streams.ingest.layouts), so an id this process caches has always been committed.
        layouts = {index: value_layout(final) for index, final in finals.items()}
        try:
            await self.layouts.ensure(self.pool, layouts.values())
            if self.prefix_id is None and finals:
                async with self.pool.acquire() as conn:
                    self.prefix_id = int(await conn.fetchval(sql.REGISTER_SUBJECT_PREFIX,
                                                             self.prefix))
        except PG_FAILURES as exc:
            raise translate_pg(exc) from exc
        known = self.layouts.ids
        layout_ids = {index: None if key is None else known[key]
                      for index, key in layouts.items()}
        for careful in (False, True):
            try:
                with tracing.span("postgres.record", {"tideway.careful": careful}):
                    async with self.pool.acquire() as conn, conn.transaction():
                        return await self._record(conn, evaluations, list(fates), finals,
                                                  layout_ids, careful, gen)
            except PgUniqueViolation:
                if careful:
                    raise PermanentError("duplicate key on the careful path",
                                         code=PERSIST_REJECTED) from None
            except PG_FAILURES as exc:
                raise translate_pg(exc) from exc
        raise AssertionError("unreachable")

    async def _record(
        self, conn: Conn, evaluations: Sequence[Evaluation],
        fates: list[Classified], finals: Mapping[int, Final],
        layout_ids: Mapping[int, int | None], careful: bool, seen_gen: int | None,
    ) -> Recorded:
        out = Recorded()
        rec = Recording(capture=self.capture, now=datetime.now(UTC), layouts=self.layouts.ids,
                        prefix=self.prefix, prefix_id=self.prefix_id)
        started = time.perf_counter_ns()
        owners: dict[str, int] = {}
        if finals:
            await conn.execute(sql.WRITE_BARRIER, sql.DEDUPE_BARRIER_KEY)
            row = await conn.fetchrow(sql.GENERATION_AND_IDS, len(finals))
            assert row is not None  # a SELECT without FROM returns one row
            rec.gen, ids = row["gen"], row["ids"]
            careful = careful or rec.gen != seen_gen
            reserved = dict(zip(finals, ids, strict=True))
        if finals and not careful:
            for index, message_id in reserved.items():
                owners[evaluations[index].key] = message_id
                rec.add(finals[index], message_id, layout_ids[index])
            await copy_lines(conn, sql.MESSAGES, sql.MESSAGE_COPY, rec.messages)
            await copy_lines(conn, sql.KEYS, sql.KEY_COPY, rec.keys)
        elif finals:
            claimed = {row["message_id"] for row in await conn.fetch(
                sql.CLAIM_KEYS, [evaluations[i].key_digest for i in finals], rec.gen,
                list(reserved.values()),
                [evaluations[i].receipt.received_at for i in finals])}
            for index, message_id in reserved.items():
                if message_id in claimed:
                    owners[evaluations[index].key] = message_id
            lost = [i for i in finals if evaluations[i].key not in owners]
            if lost:  # recorded by another consumer since the lookup: read them again
                existing, _ = await lookup(conn, [evaluations[i] for i in lost])
                again = classify([evaluations[i] for i in lost], existing)
                for index, fate in zip(lost, again, strict=True):
                    if fate.fate is Fate.NEW:  # the other writer is not visible yet: retry
                        out.contended.add(index)
                        fate = Classified(fate=Fate.RECORDED)
                    fates[index] = fate
                    if fate.owner_id is not None:
                        owners[evaluations[index].key] = fate.owner_id
            for index in finals:
                if fates[index].fate is Fate.NEW:
                    rec.add(finals[index], owners[evaluations[index].key], layout_ids[index])
            await copy_lines(conn, sql.MESSAGES, sql.MESSAGE_COPY, rec.messages)
        await copy_lines(conn, sql.TELEMETRY, sql.TELEMETRY_COPY, rec.telemetry)
        persist_us = (time.perf_counter_ns() - started) // 1000
        await copy_lines(conn, sql.STAGE_PASSES, sql.STAGE_PASS_COPY,
                         rec.stage_pass_lines(persist_us))
        for index in finals:
            if fates[index].fate is Fate.NEW:
                message_id = owners[evaluations[index].key]
                out.statuses[index] = finals[index].status
                out.message_ids[index] = message_id
                if finals[index].dead_letter:
                    out.dead_letters.append((message_id, evaluations[index],
                                             finals[index].error_code or "PUBLISH_FAILED"))
        for index, fate in enumerate(fates):
            if fate.fate is not Fate.DUPLICATE:
                continue
            ev = evaluations[index]
            owner = fate.owner_id
            if owner is None and fate.owner_index is not None:
                owner = owners.get(evaluations[fate.owner_index].key)
            if owner is None:  # its in-batch owner was not recorded this time
                out.contended.add(index)
                continue
            rec.add_duplicate(ev, owner)
            out.statuses[index] = Status.DUPLICATE
            out.message_ids[index] = owner
        if rec.duplicates:
            await conn.execute(sql.INSERT_DUPLICATES, *_columns(rec.duplicates))
        if rec.dead_letters:
            await conn.execute(sql.INSERT_DEAD_LETTERS, *_columns(rec.dead_letters))
        # Only a redelivered envelope can have notes of earlier failed deliveries, so the
        # common batch (first deliveries only) pays no statement for this.
        noted = [evaluations[i].key for i in out.message_ids
                 if evaluations[i].receipt.delivered > 1 and fates[i].fate is Fate.NEW]
        if noted:
            await conn.execute(sql.DELETE_DELIVERY_FAILURES, noted)
        return out

    async def note_failed_deliveries(self, rows: Sequence[tuple[str, int, str]]) -> None:
        """Keep the publish failures of deliveries nak'ed for another (rows from
        :func:`stages.ingest.plan.delivery_failure_row`), for the envelope's dead letter."""
        if not rows:
            return
        try:
            with tracing.span("postgres.delivery_failures"):
                async with self.pool.acquire() as conn:
                    await conn.execute(sql.INSERT_DELIVERY_FAILURES, *_columns(rows))
        except PG_FAILURES as exc:
            raise translate_pg(exc) from exc


async def copy_lines(conn: Conn, table: str, columns: Sequence[str], lines: list[str]) -> None:
    """``COPY table FROM STDIN`` of text-format lines (nothing when there are none)."""
    if lines:
        # The data as one buffer, which asyncpg sends as one message. (A file-like source is
        # read in 512 KiB chunks, each through a worker thread and back through the event
        # loop, so a busy loop kept Postgres waiting for the rest of the data.) A memoryview,
        # because asyncpg would take plain bytes for a file name. (asyncpg accepts any buffer
        # here; its type stubs list only paths, files and async iterables.)
        data = memoryview("".join(lines).encode())
        await conn.copy_to_table(table, source=data,  # type: ignore[arg-type]
                                 columns=list(columns), format="text")


def _columns(rows: Sequence[tuple[object, ...]]) -> list[list[object]]:
    return [list(column) for column in zip(*rows, strict=True)]


def _rejected(final: Final, exc: PermanentError) -> Final:
    """The minimal record of an envelope Postgres refused: no telemetry, a dead letter."""
    message = exc.message[:2000]
    ev = final.ev._replace(
        status=Status.FAILED_TERMINAL, error_code=PERSIST_REJECTED,
        error_message=message, state=None, values=None, values_json=None, issues=(),
        dead_letter=True,
        logs=(StageLog("persist", "failed", 0, PERSIST_REJECTED, message),),
    )
    return Final(ev=ev, status=Status.FAILED_TERMINAL, state=None,
                 error_code=PERSIST_REJECTED, error_message=message, publish=None,
                 dead_letter=True)
