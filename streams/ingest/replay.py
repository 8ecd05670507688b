"""``tideway replay``: feed retained JetStream envelopes through the pipeline again.

An ephemeral, ack-less consumer reads the TELEMETRY stream from ``since`` (optionally up to
``until`` and only on ``subject``), and every batch goes through the same
:meth:`~streams.ingest.pipeline.Pipeline.process` as the live consumer. Because an envelope's
identity is its receipt (stream sequence + stored time), envelopes that were processed are
recognised as already recorded and change nothing; envelopes that never made it — their
consumer was deleted, or their rows were lost — are processed now and fill the gap. A replay
can run beside live consumers: dedupe and idempotent publishing make that safe.

``dry_run`` evaluates and classifies every envelope against Postgres but writes and
publishes nothing, and reports what a real replay would do.

``reprocess`` re-derives the envelopes already recorded instead, through the devices' current
schema versions (:mod:`streams.ingest.rederive`): corrected values replace the recorded ones,
which are kept as corrections; ``dry_run`` then says what would change.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from stages.ack_policy import Action
from stages.ingest.ingress import Receipt
from stages.ingest.plan import Fate
from streams.config import Settings
from streams.errors import UsageError
from streams.ingest.fetch import ephemeral_fetcher, pending_of, receipt_of
from streams.ingest.pipeline import Pipeline
from streams.ingest.rederive import ReprocessReport, rederive_batch
from streams.ingest.resources import Resources


@dataclass(kw_only=True)
class ReplayReport:
    """What a replay found and did."""

    dry_run: bool
    scanned: int = 0
    already_recorded: int = 0
    recorded: Counter[str] = field(default_factory=Counter)
    """Statuses written (or, in a dry run, that would be written)."""
    not_recorded: int = 0
    """Envelopes left for a later attempt (a publish failure within its budget)."""
    first_seq: int | None = None
    last_seq: int | None = None
    reprocess: ReprocessReport | None = None
    """A reprocess's own findings (``None`` for a plain replay)."""

    def as_dict(self) -> dict[str, object]:
        if self.reprocess is not None:
            return {"dry_run": self.dry_run, "scanned": self.scanned,
                    "first_seq": self.first_seq, "last_seq": self.last_seq,
                    **self.reprocess.as_dict()}
        return {
            "dry_run": self.dry_run, "scanned": self.scanned,
            "already_recorded": self.already_recorded, "recorded": dict(self.recorded),
            "not_recorded": self.not_recorded, "first_seq": self.first_seq,
            "last_seq": self.last_seq,
        }


def _subject_filter(subject: str | None, settings: Settings) -> str | None:
    if subject is None:
        return None
    if not (subject.startswith("telemetry.") or subject.startswith(f"{settings.namespace}.")):
        raise UsageError(f"--subject must be a telemetry subject, got {subject!r}")
    if settings.namespace and not subject.startswith(f"{settings.namespace}."):
        subject = f"{settings.namespace}.{subject}"
    return subject


async def replay(
    settings: Settings, *, since: datetime, until: datetime | None = None,
    subject: str | None = None, dry_run: bool = False, reprocess: bool = False,
    on_batch: Callable[[ReplayReport], None] | None = None,
) -> ReplayReport:
    """Re-feed retained envelopes stored in ``[since, until]`` (see the module docstring)."""
    if since.tzinfo is None or (until is not None and until.tzinfo is None):
        raise UsageError("--since/--until need a UTC offset (e.g. 2026-05-01T12:00:00Z)")
    if until is not None and until < since:
        raise UsageError("--until is before --since")
    resources = await Resources.open(settings, name="tideway-replay")
    names = resources.names
    name = f"replay-{uuid.uuid4().hex[:12]}"
    config = ConsumerConfig(
        name=name, ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.BY_START_TIME,
        opt_start_time=since.astimezone(UTC),
        filter_subject=_subject_filter(subject, settings), inactive_threshold=60.0,
        mem_storage=True,
    )
    report = ReplayReport(dry_run=dry_run)
    if reprocess:
        report.reprocess = ReprocessReport(reprocess_id=str(uuid.uuid4()), dry_run=dry_run)
    try:
        async with ephemeral_fetcher(resources.nc, names.telemetry_stream, config) as fetcher:
            pipeline = Pipeline(resources)
            until_ns = int(until.timestamp() * 1e9) if until is not None else None
            while True:
                msgs = await fetcher.fetch(settings.consumer.batch_size, 1.0)
                if not msgs:
                    break
                receipts = [receipt_of(m) for m in msgs]
                if until_ns is not None:
                    receipts = [r for r in receipts if r.received_at_ns <= until_ns]
                if receipts:
                    report.scanned += len(receipts)
                    report.first_seq = report.first_seq or receipts[0].stream_seq
                    report.last_seq = receipts[-1].stream_seq
                    if report.reprocess is not None:
                        await rederive_batch(pipeline, receipts, report.reprocess)
                    else:
                        await _one_batch(pipeline, receipts, report)
                    if on_batch is not None:
                        on_batch(report)
                if pending_of(msgs[-1]) == 0 or len(receipts) < len(msgs):
                    break
    finally:
        await resources.close()
    return report


async def _one_batch(pipeline: Pipeline, receipts: list[Receipt], report: ReplayReport) -> None:
    if report.dry_run:
        evaluations, fates, _ = await pipeline.prepare(receipts)
        for ev, fate in zip(evaluations, fates, strict=True):
            if fate.fate is Fate.RECORDED:
                report.already_recorded += 1
            elif fate.fate is Fate.DUPLICATE:
                report.recorded["duplicate"] += 1
            else:
                report.recorded[ev.status.value] += 1
        return
    result = await pipeline.process(receipts)
    report.already_recorded += result.stats.already_recorded
    report.recorded.update(result.stats.statuses)
    report.not_recorded += sum(1 for d in result.decisions if d.action is Action.NAK)
