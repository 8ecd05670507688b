"""A schema version tried on the envelopes devices really sent (``tideway schema test --device``).

``schema test FILE --payload`` answers for one hand-written payload; this answers the question
an operator actually has before ``schema apply``: *what would this version do to the traffic
my devices send?* It reads the device's envelopes still retained in the ``TELEMETRY`` stream
(the newest ``last``, optionally only those stored since ``since`` and on one topic) through an
ephemeral, ack-less consumer, runs each through :func:`stages.ingest.evaluate.evaluate` — the
very function the live consumer runs, with the candidate's compiled topics bound to the device
in place of its current version — and sets the outcome beside what Postgres recorded for the
same envelope (found by its dedupe key, as the consumer finds it). Nothing is written anywhere.

The answer, a :class:`TrialReport`:

- per envelope, the recorded status, error code, schema version and values, and the
  candidate's status, error code, reason codes and values;
- how many envelopes would change status, counted per ``old → new`` transition, and the
  reason codes of the new refusals;
- per parameter, how many values would change and the min / median / max of the difference
  (numbers), and how many would appear or disappear;
- the share of the envelopes the candidate would refuse (any status but ``completed`` and
  ``inactive_skipped``); above ``schemas.trial_max_refused_share`` the trial is *flagged*, and
  ``tideway schema apply --check-last N`` refuses to store such a version.

Envelopes the stream no longer holds (its ``max_age`` passed) cannot be tried: the archive keeps
the rows a version recorded, not the bodies, so the report counts what it found.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
import uuid
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from stages.ingest.evaluate import DeviceRecord, Evaluation, Registry, TopicBinding, evaluate
from stages.ingest.ingress import Receipt, parse_subject
from stages.ingest.status import Status
from stages.ingest.topic_program import TopicProgram
from streams.adapters import postgres
from streams.adapters.nats import Nats, connect_nats
from streams.adapters.postgres import Conn
from streams.config import Settings
from streams.errors import NotFoundError, UsageError
from streams.ingest.fetch import ephemeral_fetcher, pending_of, receipt_of
from streams.names import Names

__all__ = ["ParameterDiff", "TrialReport", "TrialScope", "scope_of", "tally", "trial",
           "try_on_traffic"]

CANDIDATE = uuid.UUID(int=0)
"""The schema version id the candidate's topics are bound under (no stored version has it)."""

_ACCEPTED = frozenset({Status.COMPLETED.value, Status.INACTIVE_SKIPPED.value})
_PULL = 8000
"""Envelopes asked for per pull (the consumer's batch size)."""
_CHUNK = 10_000
"""Envelopes compared per statement."""
_SHOWN = 200
"""Envelopes listed in a report (the changed ones first); the summary counts them all."""

_DEVICES = """
SELECT d.id, d.tenant_id, tn.name AS tenant, d.external_id, d.active, d.schema_version_id,
       s.name AS schema_name
FROM devices d
JOIN tenants tn ON tn.id = d.tenant_id
LEFT JOIN device_schema_versions v ON v.id = d.schema_version_id
LEFT JOIN device_schemas s ON s.id = v.schema_id
WHERE tn.name = $1 AND ($2::text IS NULL OR d.external_id = $2)
  AND ($3::text IS NULL OR s.name = $3)
ORDER BY d.external_id
"""

# What the current versions recorded for each envelope, by dedupe key digest (a repeat of a
# message id is one row: its owner's). The version is the message row's or, where the row
# leaves it to its telemetry row (migration 0020), the values layout's. The telemetry rows are
# read over the messages' receipt window (BRIN on received_at) and joined in bulk:
# one BRIN probe per envelope on the message id cost 1 ms each (bench/change_safety.py).
_RECORDED = """
WITH m AS (
    SELECT k.key_hash, m.id, m.received_at, m.status, m.error_code, m.schema_version_id
    FROM unnest($1::uuid[]) AS u(h)
    JOIN ingest_dedupe_keys k ON k.key_hash = u.h
    JOIN ingestion_messages m ON m.id = k.message_id AND m.received_at = k.received_at
)
SELECT m.key_hash::text AS key, m.id, m.status::text AS status, m.error_code, v.version,
       telemetry_values(t.values_layout, t.parameter_list)::text AS values_json
FROM m
LEFT JOIN (SELECT t.ingestion_message_id, t.received_at, t.values_layout, t.parameter_list
           FROM device_telemetry_logs t
           WHERE t.received_at BETWEEN (SELECT min(received_at) FROM m)
                                   AND (SELECT max(received_at) FROM m)) AS t
       ON t.ingestion_message_id = m.id AND t.received_at = m.received_at
LEFT JOIN telemetry_value_layouts l ON l.id = t.values_layout
LEFT JOIN device_schema_versions v ON v.id = coalesce(m.schema_version_id, l.schema_version_id)
"""


@dataclass(frozen=True, kw_only=True)
class TrialScope:
    """The devices whose envelopes are tried, with the candidate bound to each."""

    tenant: str
    registry: Registry
    subjects: tuple[str, ...]
    """The stream subjects read (one per topic, or the device's wildcard)."""


async def scope_of(conn: Conn, names: Names, *, tenant: str, programs: Mapping[str, TopicProgram],
                   device: str | None = None, schema: str | None = None,
                   topic: str | None = None) -> TrialScope:
    """The devices tried: ``device`` of ``tenant``, or every device of ``tenant`` on a version
    of ``schema`` (``NotFoundError`` when there is none), each bound to the candidate."""
    rows = await conn.fetch(_DEVICES, tenant, device, None if device else schema)
    if not rows:
        what = f"device {device!r}" if device else f"device on schema {schema!r}"
        raise NotFoundError(f"tenant {tenant!r} has no {what}")
    if topic is not None and topic not in programs:
        raise UsageError(f"the schema has no topic {topic!r} ({', '.join(programs)})")
    devices = {
        (r["tenant"], r["external_id"]): DeviceRecord(
            id=r["id"], tenant_id=r["tenant_id"], tenant=r["tenant"],
            external_id=r["external_id"], active=r["active"], schema_version_id=CANDIDATE)
        for r in rows
    }
    topics = {
        (CANDIDATE, name): TopicBinding(schema_version_id=CANDIDATE,
                                        schema_topic_id=uuid.uuid5(CANDIDATE, name),
                                        program=program)
        for name, program in programs.items()
    }
    who = device if device is not None else "*"
    wanted = [topic] if topic is not None else list(programs)
    subjects = tuple(names.telemetry_subject(tenant, who, t) for t in wanted)
    return TrialScope(tenant=tenant, registry=Registry(devices=devices, topics=topics),
                      subjects=subjects)


@dataclass
class ParameterDiff:
    """How one parameter's values differ between two versions, over many envelopes."""

    changed: int = 0
    appeared: int = 0
    disappeared: int = 0
    deltas: list[float] = field(default_factory=list)

    def add(self, old: Any, new: Any) -> None:
        """One envelope whose value went from ``old`` to ``new`` (both present)."""
        self.changed += 1
        if _number(old) and _number(new):
            delta = float(new) - float(old)
            if math.isfinite(delta):
                self.deltas.append(delta)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"changed": self.changed, "appeared": self.appeared,
                               "disappeared": self.disappeared,
                               "min": None, "median": None, "max": None}
        if self.deltas:  # to 9 decimals: what float arithmetic adds below that is noise
            out.update(min=round(min(self.deltas), 9),
                       median=round(statistics.median(self.deltas), 9),
                       max=round(max(self.deltas), 9))
        return out


@dataclass(kw_only=True)
class TrialReport:
    """What a candidate schema version would make of recorded traffic (module docstring)."""

    tenant: str
    schema: str
    content_hash: str
    subjects: tuple[str, ...]
    max_refused_share: float
    scanned: int = 0
    """Envelopes of the scope's devices read (the newest ``last``; repeats included)."""
    repeats: int = 0
    """Envelopes that repeat a message id read earlier (tried once, as ingest dedupes them)."""
    out_of_scope: int = 0
    """Envelopes passed over on the subjects read: their device is not on the schema
    (``--check-last``) or not registered."""
    compared: int = 0
    """Tried envelopes Postgres holds a record of (the others: never recorded, or forgotten)."""
    refused: int = 0
    status_changes: Counter[str] = field(default_factory=Counter)
    """``"old → new"`` → envelopes (only changes)."""
    new_statuses: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    """Reason codes of the candidate's refusals (a validation's issue codes, else its code)."""
    parameters: dict[str, ParameterDiff] = field(default_factory=dict)
    envelopes: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def tried(self) -> int:
        return self.scanned - self.repeats

    @property
    def refused_share(self) -> float:
        return self.refused / self.tried if self.tried else 0.0

    @property
    def flagged(self) -> bool:
        return self.tried > 0 and self.refused_share > self.max_refused_share

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant, "schema": self.schema, "content_hash": self.content_hash,
            "subjects": list(self.subjects), "scanned": self.scanned, "repeats": self.repeats,
            "out_of_scope": self.out_of_scope, "tried": self.tried, "compared": self.compared,
            "status_changed": sum(self.status_changes.values()),
            "status_changes": dict(self.status_changes.most_common()),
            "statuses": dict(self.new_statuses.most_common()),
            "reasons": dict(self.reasons.most_common()),
            "refused": self.refused, "refused_share": round(self.refused_share, 6),
            "max_refused_share": self.max_refused_share, "flagged": self.flagged,
            "parameters": {k: v.as_dict() for k, v in sorted(self.parameters.items())},
            "envelopes": self.envelopes, "elapsed_s": round(self.elapsed_s, 3),
        }


async def _read(nc: Nats, stream: str, scope: TrialScope, prefix: str, *, last: int,
                since: datetime | None) -> tuple[list[Receipt], int]:
    """The newest ``last`` envelopes of the scope's devices on its subjects (stored since
    ``since``), oldest first, and how many envelopes of other devices were passed over."""
    name = f"schema-trial-{uuid.uuid4().hex[:12]}"
    config = ConsumerConfig(
        name=name, ack_policy=AckPolicy.NONE, mem_storage=True, inactive_threshold=60.0,
        deliver_policy=DeliverPolicy.ALL if since is None else DeliverPolicy.BY_START_TIME,
        opt_start_time=None if since is None else since.astimezone(UTC),
        filter_subjects=list(scope.subjects),
    )
    kept: deque[Receipt] = deque(maxlen=last)
    devices = scope.registry.devices
    others = 0
    async with ephemeral_fetcher(nc, stream, config) as fetcher:
        while True:
            msgs = await fetcher.fetch(_PULL, 1.0)
            if not msgs:
                break
            for m in msgs:
                receipt = receipt_of(m)
                parts = parse_subject(receipt.subject, prefix)
                if parts is not None and (parts.tenant, parts.device) not in devices:
                    others += 1  # a device of the tenant on another schema (--check-last)
                else:
                    kept.append(receipt)
            if pending_of(msgs[-1]) == 0:
                break
    return list(kept), others


async def trial(nc: Nats, conn: Conn, names: Names, scope: TrialScope, *, schema: str,
                content_hash: str, last: int, since: datetime | None = None,
                max_payload_bytes: int, max_refused_share: float) -> TrialReport:
    """Try the candidate bound in ``scope`` on the newest ``last`` envelopes of its subjects
    (stored since ``since``) and compare with what was recorded; writes nothing."""
    if last < 1:
        raise UsageError("--last must be at least 1")
    if since is not None and since.tzinfo is None:
        raise UsageError("--since needs a UTC offset (e.g. 2026-05-01T12:00:00Z)")
    started = time.perf_counter()
    report = TrialReport(tenant=scope.tenant, schema=schema, content_hash=content_hash,
                         subjects=scope.subjects, max_refused_share=max_refused_share)
    receipts, report.out_of_scope = await _read(nc, names.telemetry_stream, scope,
                                                names.namespace, last=last, since=since)
    report.scanned = len(receipts)
    # Pure CPU over up to every envelope read: off the event loop, so an API process serving a
    # trial keeps answering its other requests meanwhile.
    evaluations = await asyncio.to_thread(_evaluate_all, receipts, scope, names.namespace,
                                          max_payload_bytes, report)
    recorded: dict[str, Any] = {}
    for start in range(0, len(evaluations), _CHUNK):
        part = evaluations[start:start + _CHUNK]
        recorded.update((r["key"].replace("-", ""), r) for r in await conn.fetch(
            _RECORDED, [ev.key_digest for ev in part]))
    report.envelopes = await asyncio.to_thread(_compare_all, evaluations, recorded, report)
    report.elapsed_s = time.perf_counter() - started
    return report


def _evaluate_all(receipts: list[Receipt], scope: TrialScope, prefix: str,
                  max_payload_bytes: int, report: TrialReport) -> list[Evaluation]:
    """Each receipt through the consumer's evaluation with the candidate bound; a repeat of a
    message id is counted, not tried again (ingest dedupes it)."""
    evaluations: list[Evaluation] = []
    seen: set[str] = set()
    for receipt in receipts:
        ev = evaluate(receipt, scope.registry, prefix=prefix,
                      max_payload_bytes=max_payload_bytes, capture=False,
                      clock=time.perf_counter_ns)
        if ev.key_digest in seen:
            report.repeats += 1
            continue
        seen.add(ev.key_digest)
        evaluations.append(ev)
    return evaluations


def _compare_all(evaluations: list[Evaluation], recorded: Mapping[str, Any],
                 report: TrialReport) -> list[dict[str, Any]]:
    """Every evaluation beside its record, counted into ``report``; the rows listed: status
    changes first, then value changes, then the rest, each in stream order (only as many of
    each as can be shown; the summary counts them all)."""
    shown: tuple[list[dict[str, Any]], ...] = ([], [], [])
    for ev in evaluations:
        row = _compare(ev, recorded.get(ev.key_digest), report)
        rank = 0 if row["old_status"] not in (None, row["new_status"]) else \
            1 if row["changed"] else 2
        if len(shown[rank]) < _SHOWN:
            shown[rank].append(row)
    return [*shown[0], *shown[1], *shown[2]][:_SHOWN]


def _compare(ev: Evaluation, old: Any, report: TrialReport
             ) -> dict[str, Any]:
    new_status = ev.status.value
    report.new_statuses[new_status] += 1
    reasons = sorted({i.code for i in ev.issues if i.critical or new_status != "completed"})
    if new_status not in _ACCEPTED:
        report.refused += 1
        report.reasons.update(reasons or [ev.error_code or new_status])
    new_values = ev.values or {}
    row: dict[str, Any] = {
        "stream_seq": ev.receipt.stream_seq,
        "device": ev.parts.device if ev.parts else None,
        "topic": ev.parts.topic if ev.parts else None,
        "key": ev.key,
        "measured_at": None if ev.envelope is None else ev.envelope.ts,
        "message_id": None, "old_status": None, "old_error_code": None, "old_version": None,
        "old_values": None,
        "new_status": new_status, "new_error_code": ev.error_code, "new_reasons": reasons,
        "new_values": ev.values, "changed_parameters": [], "changed": False,
    }
    if old is None:
        return row
    report.compared += 1
    old_values = orjson.loads(old["values_json"]) if old["values_json"] else {}
    row.update(message_id=old["id"], old_status=old["status"], old_error_code=old["error_code"],
               old_version=old["version"], old_values=old_values or None)
    if old["status"] != new_status:
        report.status_changes[f"{old['status']} → {new_status}"] += 1
        row["changed"] = True
    # Values are set side by side where both versions complete the envelope (a refusal keeps
    # the extracted values only, so its difference would be the missing stages, not news).
    both = old["status"] == new_status == Status.COMPLETED.value
    changed = tally(report.parameters, old_values, new_values) if both else []
    row["changed_parameters"] = changed
    row["changed"] = row["changed"] or bool(changed)
    return row


def tally(parameters: dict[str, ParameterDiff], old: Mapping[str, Any],
          new: Mapping[str, Any]) -> list[str]:
    """Count, per parameter, how ``new`` differs from ``old`` (one envelope's values) into
    ``parameters``; the names that differ (a schema trial's and a reprocess's summaries)."""
    changed = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a == b and (name in old) == (name in new):
            continue
        diff = parameters.setdefault(name, ParameterDiff())
        changed.append(name)
        if name not in old or a is None:
            diff.appeared += 1
        elif name not in new or b is None:
            diff.disappeared += 1
        else:
            diff.add(a, b)
    return changed


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def try_on_traffic(settings: Settings, *, tenant: str, schema: str, content_hash: str,
                         programs: Mapping[str, TopicProgram], device: str | None = None,
                         topic: str | None = None, last: int | None = None,
                         since: datetime | None = None) -> TrialReport:
    """:func:`trial` on connections of its own: the candidate on ``device``'s traffic, or (no
    device) on the traffic of every device of ``tenant`` on a version of ``schema``."""
    names = Names(namespace=settings.namespace)
    conn = await postgres.connect(settings.postgres())
    try:
        scope = await scope_of(conn, names, tenant=tenant, programs=programs, device=device,
                               schema=schema, topic=topic)
        nc = await connect_nats(settings.nats, name="tideway-schema-trial",
                                trusted_subjects=True, attempts=1)
        try:
            return await trial(
                nc, conn, names, scope, schema=schema, content_hash=content_hash,
                last=last or settings.schemas.trial_last, since=since,
                max_payload_bytes=settings.consumer.max_payload_bytes,
                max_refused_share=settings.schemas.trial_max_refused_share)
        finally:
            await nc.close()
    finally:
        await conn.close()
