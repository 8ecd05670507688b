"""Turn a batch of evaluations, and what Postgres already holds, into the rows to write.

Theory of operation (one batch; the runtime does the I/O between the steps):

1. every envelope is evaluated (:mod:`stages.ingest.evaluate`);
2. one dedupe read returns the rows already holding the batch's keys, and the duplicate rows
   already holding its receipts; :func:`classify` gives each envelope its :class:`Fate`:

   * ``RECORDED``  — this very message (same receipt) already has its status: nothing to do;
   * ``DUPLICATE`` — another message owns the key: record a ``duplicate`` row, no telemetry,
     no side effect (the owner is an existing row, or an earlier envelope of this batch);
   * ``NEW``       — record it with the status its evaluation ended in;

3. the new envelopes that need it are published (idempotently, so a crash before the next
   step only causes a harmless re-publish on redelivery);
4. one transaction inserts the new rows with their *final* statuses, their dedupe keys
   (``ingest_dedupe_keys``, in the transaction's dedupe generation), telemetry rows, stage
   logs, duplicate rows and dead letters (:class:`Recording` builds each row).

Each row is written once; nothing is updated on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

import orjson

from schemas import error_codes as codes
from stages.ingest.copy_format import NULL, copy_text, json_field, text, text_array
from stages.ingest.evaluate import Evaluation, StageLog, issues_json
from stages.ingest.ingress import iso_utc
from stages.ingest.processing_state import PROCESSING_MACHINE, ProcessingState, recorded_path
from stages.ingest.processing_state import check_path as check_state_path
from stages.ingest.status import FINAL, STATUS_MACHINE, Status, check_path
from stages.ingest.status import recorded_path as recorded_path_of_status

PUBLISH_FAILED = codes.PUBLISH_FAILED

MESSAGE_COPY_COLUMNS = (
    "id", "source_deduplication_key", "stream_seq", "received_at", "subject", "traceparent",
    "payload_bytes", "tenant_id", "device_id", "schema_version_id", "schema_topic_id",
    "measured_at", "seq", "status", "error_code", "error_message", "subject_prefix",
)
DUPLICATE_COLUMNS = (
    "duplicate_of", "stream_seq", "received_at", "subject", "traceparent", "payload_bytes",
    "tenant_id", "device_id", "measured_at", "seq",
)
STAGE_PASS_COLUMNS = (
    "message_ids", "message_id_min", "message_id_max", "attempt", "stages", "failed",
    "durations", "error_codes", "error_messages", "input_snapshots", "output_snapshots",
)
STAGE_ORDER = ("ingress", "validate", "mutate", "derive", "persist", "publish")
STAGE_BIT = {stage: 1 << i for i, stage in enumerate(STAGE_ORDER)}
"""A pass stores the stages it reached, and those that failed, as bitmasks over
:data:`STAGE_ORDER` (migration 0012); its arrays follow that order."""
TELEMETRY_COLUMNS = (
    "ingestion_message_id", "device_id", "measured_at", "seq", "received_at",
    "processing_state", "values_layout", "parameter_list", "validation_issues",
)
INT32_MAX = 2**31 - 1
_NO_CARRIED = "\t".join([NULL] * 6)
"""The tenant, device, schema version, topic, measurement time and ``seq`` of a message row
whose telemetry row holds them (migration 0020)."""
DEAD_LETTER_COLUMNS = (
    "ingestion_message_id", "tenant", "subject", "headers", "payload", "reason_code", "failures",
    "dedupe_key", "schema_version_id",
)


class Fate(StrEnum):
    """What the dedupe read says about one envelope (see the module docstring)."""

    NEW = "new"
    RECORDED = "recorded"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, kw_only=True, slots=True)
class Existing:
    """A row already in ``ingestion_messages`` that shares a key or receipt with the batch."""

    id: int
    key: str | None
    """The key's digest (:func:`stages.ingest.ingress.key_hash`: what the row stores since
    migration 0020); ``None`` for a duplicate row."""
    stream_seq: int
    received_at: datetime
    status: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Classified:
    """An envelope's fate; a duplicate names its owner by row id or by batch position."""

    fate: Fate
    owner_id: int | None = None
    owner_index: int | None = None


NEW = Classified(fate=Fate.NEW)
RECORDED = Classified(fate=Fate.RECORDED)


def classify(evaluations: Sequence[Evaluation], existing: Sequence[Existing]) -> list[Classified]:
    """Decide each envelope's :class:`Fate` from the rows the dedupe read returned."""
    by_key = {row.key: row for row in existing if row.key is not None}
    duplicate_receipts = {(row.stream_seq, row.received_at) for row in existing if row.key is None}
    first_in_batch: dict[str, int] = {}
    out: list[Classified] = []
    for index, ev in enumerate(evaluations):
        receipt = (ev.receipt.stream_seq, ev.receipt.received_at)
        owner = by_key.get(ev.key_digest)
        if receipt in duplicate_receipts or (
            owner is not None and (owner.stream_seq, owner.received_at) == receipt
        ):
            out.append(RECORDED)
        elif owner is not None:
            out.append(Classified(fate=Fate.DUPLICATE, owner_id=owner.id))
        elif ev.key in first_in_batch:
            out.append(Classified(fate=Fate.DUPLICATE, owner_index=first_in_batch[ev.key]))
        else:
            first_in_batch[ev.key] = index
            out.append(NEW)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishFailure:
    """One failed side effect of one envelope (kept in its dead letter)."""

    sink: str  # "hot_state" | "analytics"
    code: str
    message: str
    attempts: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishOutcome:
    """What publishing did for one envelope."""

    duration_us: int
    hot_state_written: bool = False
    analytics_published: bool = False
    failures: tuple[PublishFailure, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures


class Final(NamedTuple):
    """How one new envelope is recorded (a tuple: one is made per envelope)."""

    ev: Evaluation
    status: Status
    state: ProcessingState | None
    error_code: str | None
    error_message: str | None
    publish: PublishOutcome | None
    dead_letter: bool


def finalize(ev: Evaluation, publish: PublishOutcome | None) -> Final:
    """The recorded status of a new envelope, given its publish outcome (if it needed one)."""
    if ev.needs_publish and publish is not None and not publish.ok:
        message = "; ".join(f"{f.sink}: {f.message}" for f in publish.failures)
        return Final(ev=ev, status=Status.FAILED_TERMINAL, state=ProcessingState.PUBLISH_FAILED,
                     error_code=PUBLISH_FAILED, error_message=message, publish=publish,
                     dead_letter=True)
    # Positional: keyword construction of a NamedTuple costs twice as much, once per envelope.
    return Final(ev, ev.status, ev.state, ev.error_code, ev.error_message, publish,
                 ev.dead_letter)


_ALL_STAGES = sum(STAGE_BIT.values())
_SLOTS = len(STAGE_ORDER)
_EMPTY_SLOTS: list[Any] = [None] * _SLOTS


class StagePasses:
    """Processing passes of one attempt number, written as **one** ``ingestion_stage_passes``
    row (migration 0019): the stage logs of every envelope a recording transaction wrote.

    A row holds parallel arrays, one element per pass: ``message_ids``, the stages reached and
    those that failed (bitmasks over :data:`STAGE_ORDER`); and six slots per pass, one per
    stage in that order, for ``durations`` (µs; 0 for a stage not reached) and, only when some
    pass has them, ``error_codes`` / ``error_messages`` and the snapshots. One row per batch
    instead of one per envelope: the row header, the BRIN entry and the arrays' headers are
    paid once, and Postgres compresses the arrays of a large batch (96 → about 9 bytes per
    envelope; docs/storage.md).

    Errors and snapshots are kept per pass that has them and spread into slots only when the
    line is made: a completed pass costs three appends and one extend (about 1 µs on the build
    machine, against 8.6 µs when every pass filled its twelve error slots).
    """

    __slots__ = ("attempt", "capture", "durations", "errors", "failed", "ids", "snapshots",
                 "stages")

    def __init__(self, attempt: int, capture: bool) -> None:
        self.attempt = attempt
        self.capture = capture
        self.ids: list[int] = []
        self.stages: list[int] = []
        self.failed: list[int] = []
        self.durations: list[int] = []
        # (pass index, its six slots) for the passes that have errors / snapshots.
        self.errors: list[tuple[int, list[str | None], list[str | None]]] = []
        self.snapshots: list[tuple[int, list[Any], list[Any]]] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add_completed(self, message_id: int, durations: tuple[int, ...]) -> None:
        """A pass that reached every stage, none failed, no errors and no snapshots (a
        completed envelope without capture: the bulk of all passes); ``durations`` are the
        six stages' in order, each within what an ``integer`` holds."""
        self.ids.append(message_id)
        self.stages.append(_ALL_STAGES)
        self.failed.append(0)
        self.durations += durations

    def add(self, message_id: int, logs: Sequence[StageLog]) -> None:
        """A pass of ``logs`` (each stage at most once, in any order)."""
        reached = failed = 0
        durations = [0] * _SLOTS
        codes: list[str | None] = [None] * _SLOTS
        messages: list[str | None] = [None] * _SLOTS
        inputs: list[Any] = [None] * _SLOTS
        outputs: list[Any] = [None] * _SLOTS
        for log in logs:
            bit = STAGE_BIT[log.stage]
            if reached & bit:
                raise ValueError(f"stage {log.stage} logged twice in one pass")
            reached |= bit
            if log.status == "failed":
                failed |= bit
            slot = bit.bit_length() - 1
            durations[slot] = min(max(log.duration_us, 0), INT32_MAX)
            codes[slot], messages[slot] = log.error_code, log.error_message
            inputs[slot], outputs[slot] = log.input_snapshot, log.output_snapshot
        index = len(self.ids)
        self.ids.append(message_id)
        self.stages.append(reached)
        self.failed.append(failed)
        self.durations += durations
        if codes != _EMPTY_SLOTS or messages != _EMPTY_SLOTS:
            self.errors.append((index, codes, messages))
        if self.capture and (inputs != _EMPTY_SLOTS or outputs != _EMPTY_SLOTS):
            self.snapshots.append((index, inputs, outputs))

    def line(self) -> str:
        """The row as a ``COPY`` text line (columns :data:`STAGE_PASS_COLUMNS`)."""
        ids = self.ids
        codes = messages = inputs = outputs = NULL
        if self.errors:
            code_slots = self._slots([(i, c) for i, c, _ in self.errors])
            message_slots = self._slots([(i, m) for i, _, m in self.errors])
            codes = copy_text(text_array(code_slots))
            messages = copy_text(text_array(message_slots))
        if self.snapshots:
            inputs = _snapshots(self._slots([(i, s) for i, s, _ in self.snapshots]))
            outputs = _snapshots(self._slots([(i, s) for i, _, s in self.snapshots]))
        return "\t".join((
            "{" + ",".join(map(str, ids)) + "}", str(min(ids)), str(max(ids)), str(self.attempt),
            "{" + ",".join(map(str, self.stages)) + "}",
            "{" + ",".join(map(str, self.failed)) + "}",
            "{" + ",".join(map(str, self.durations)) + "}",
            codes, messages, inputs, outputs,
        )) + "\n"

    def _slots(self, passes: list[tuple[int, list[Any]]]) -> list[Any]:
        """Six slots per pass of the row, ``None`` but for ``passes``' own."""
        slots: list[Any] = [None] * (_SLOTS * len(self.ids))
        for index, values in passes:
            slots[_SLOTS * index:_SLOTS * (index + 1)] = values
        return slots


def pass_lines(passes: Sequence[tuple[int, int, Sequence[StageLog]]], capture: bool) -> list[str]:
    """``(message_id, attempt, logs)`` passes as ``COPY`` lines of ``ingestion_stage_passes``:
    one row per attempt number (a redrive's passes can differ in it)."""
    rows: dict[int, StagePasses] = {}
    for message_id, attempt, logs in passes:
        row = rows.get(attempt)
        if row is None:
            row = rows[attempt] = StagePasses(attempt, capture)
        row.add(message_id, logs)
    return [row.line() for row in rows.values()]


LayoutKey = tuple[str, str, tuple[str, ...]]
"""A telemetry values layout: schema version (its UUID's text: hashing a ``UUID`` costs a
Python call, once per envelope), topic, the values' keys in order."""


def value_layout(final: Final) -> LayoutKey | None:
    """The layout of the telemetry row :meth:`Recording.add` will write for ``final``
    (``None``: it writes none)."""
    ev = final.ev
    if final.state is None or ev.device is None or ev.binding is None:
        return None
    return (ev.binding.version_text, ev.binding.program.topic, tuple(ev.values or ()))


def _snapshots(snapshots: list[Any]) -> str:
    if all(snapshot is None for snapshot in snapshots):
        return NULL
    return json_field(orjson.dumps(snapshots, default=str).decode())


def _recordable() -> tuple[frozenset[Status], frozenset[ProcessingState]]:
    # Every (status, state) a batch may insert, checked once against the machines' tables so
    # the per-envelope check is a set lookup.
    statuses = frozenset(s for s in Status if s in FINAL and s is not Status.DUPLICATE)
    for status in statuses:
        check_path(recorded_path_of_status(status))
    states = frozenset(ProcessingState)
    for state in states:
        check_state_path(recorded_path(state))
    return statuses, states


RECORDABLE_STATUSES, RECORDABLE_STATES = _recordable()


@dataclass(kw_only=True, slots=True)
class Recording:
    """Rows for the recording transaction, built once the new rows' ids are known.

    Messages, telemetry and stage logs are ``COPY`` text lines (cheap to build, and the bulk of
    the batch); duplicates and dead letters are rare and stay tuples for ``unnest`` inserts.
    :meth:`add` makes a new envelope's message and telemetry lines; :meth:`stage_pass_lines`
    makes every stage-log pass once the persist step has been timed.
    """

    capture: bool
    now: datetime
    gen: int = 0
    """The dedupe generation the keys are written into."""
    messages: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    """``ingest_dedupe_keys`` lines of the new envelopes (the fast path copies them; the
    careful path claims the keys with ``CLAIM_KEYS`` before adding the winners)."""
    telemetry: list[str] = field(default_factory=list)
    dead_letters: list[tuple[Any, ...]] = field(default_factory=list)
    duplicates: list[tuple[Any, ...]] = field(default_factory=list)
    recorded: list[tuple[Final, int]] = field(default_factory=list)
    layouts: Mapping[LayoutKey, int] = field(default_factory=dict)
    """Value layout ids (``telemetry_value_layouts``): every layout of the batch's telemetry
    (:func:`value_layout`) must be in it."""
    prefix: str = ""
    """The consumer's subject prefix (``"<namespace>."`` or ``""``)."""
    prefix_id: int | None = None
    """Its id in ``ingest_subject_prefixes``; with it, a subject that the message's tenant,
    device and topic spell under ``prefix`` is left out of the row (migration 0018)."""

    def add(self, final: Final, message_id: int, layout: int | None = None) -> None:
        """The message row, dedupe key, telemetry row and dead letter of one new envelope
        (``layout``: its telemetry's layout id, when the caller has looked it up already)."""
        # Hot path: one f-string per line; fields that cannot hold special characters (ids,
        # numbers, validated subjects) skip escaping.
        status = final.status
        if status not in RECORDABLE_STATUSES:
            raise STATUS_MACHINE.illegal(f"an envelope cannot be recorded as {status}")
        ev = final.ev
        receipt, device, binding, env = ev.receipt, ev.device, ev.binding, ev.envelope
        received = receipt.received_iso
        if env is not None:
            measured = iso_utc(env.ts_us)
            seq = NULL if env.seq is None else str(env.seq)
        else:
            measured = seq = NULL
        subject, prefix_id = (receipt.subject if ev.parts is not None
                              else copy_text(receipt.subject)), NULL
        if (self.prefix_id is not None and device is not None and binding is not None
                and receipt.subject == f"{self.prefix}telemetry.{device.tenant}."
                                       f"{device.external_id}.{binding.program.topic}"):
            subject, prefix_id = NULL, str(self.prefix_id)
        trace = receipt.traceparent or NULL
        error = (f"{NULL}\t{NULL}" if final.error_code is None else
                 f"{copy_text(final.error_code)}\t{copy_text(final.error_message)}")
        state = final.state
        if state is not None and device is not None and binding is not None:
            # The telemetry row carries the device, the measurement and (through its values
            # layout) the schema version and topic; the message row leaves them NULL
            # (migration 0020; the ingestion_records view reads them back).
            if state not in RECORDABLE_STATES:
                raise PROCESSING_MACHINE.illegal(f"telemetry cannot be recorded as {state}")
            issues = (json_field(orjson.dumps(issues_json(ev.issues)).decode())
                      if ev.issues else NULL)
            values = ev.values or {}
            if layout is None:
                layout = self.layouts[(binding.version_text, binding.program.topic,
                                       tuple(values))]
            listed = json_field(orjson.dumps(list(values.values())).decode())
            self.telemetry.append(
                f"{message_id}\t{device.id_text}\t{measured}\t{seq}\t{received}\t"
                f"{state.value}\t{layout}\t{listed}\t{issues}\n"
            )
            carried = _NO_CARRIED
        else:
            ids = (f"{device.tenant_id_text}\t{device.id_text}" if device is not None
                   else f"{NULL}\t{NULL}")
            schema = (f"{binding.version_text}\t{binding.topic_id_text}" if binding is not None
                      else f"{NULL}\t{NULL}")
            carried = f"{ids}\t{schema}\t{measured}\t{seq}"
        self.messages.append(
            f"{message_id}\t{ev.key_digest}\t{receipt.stream_seq}\t{received}\t{subject}\t"
            f"{trace}\t{len(receipt.data)}\t{carried}\t{status.value}\t{error}\t{prefix_id}\n"
        )
        self.keys.append(f"{ev.key_digest}\t{self.gen}\t{message_id}\t{received}\n")
        self.recorded.append((final, message_id))
        if final.dead_letter:
            self.dead_letters.append(self.dead_letter_row(final, message_id))

    def stage_pass_lines(self, persist_us: int) -> list[str]:
        """The stage logs of every recorded envelope (``persist`` took ``persist_us``), as
        the ``COPY`` line of one ``ingestion_stage_passes`` row (none when nothing was
        recorded)."""
        capture = self.capture
        persist_us = min(max(persist_us, 0), INT32_MAX)
        passes = StagePasses(1, capture)
        for final, message_id in self.recorded:
            ev, publish = final.ev, final.publish
            logs = ev.logs
            if (not capture and final.status is Status.COMPLETED and len(logs) == 4
                    and publish is not None and publish.ok
                    and final.state is not None and ev.device is not None):
                # Completed: every stage ok, so only the durations vary. The stages' own
                # durations are microseconds of CPU work; persist and publish wait on services
                # (the row clamps them to what an integer holds).
                a, b, c, d = logs
                passes.add_completed(message_id, (a.duration_us, b.duration_us, c.duration_us,
                                                  d.duration_us, persist_us,
                                                  min(publish.duration_us, INT32_MAX)))
                continue
            passed = list(logs)
            if final.state is not None and ev.device is not None:
                passed.append(StageLog(
                    "persist", "ok", persist_us, None, None,
                    {"processing_state": final.state.value} if capture else None,
                    {"device_telemetry_log_id": message_id} if capture else None))
            if publish is not None:
                failed = not publish.ok
                passed.append(StageLog(
                    "publish", "failed" if failed else "ok", publish.duration_us,
                    PUBLISH_FAILED if failed else None, final.error_message if failed else None,
                    None, {"hot_state_written": publish.hot_state_written,
                           "analytics_published": publish.analytics_published}
                    if capture else None))
            passes.add(message_id, passed)
        return [passes.line()] if passes else []

    def dead_letter_row(self, final: Final, message_id: int) -> tuple[Any, ...]:
        """The dead letter of a new envelope. Its failures are this delivery's; the SQL that
        inserts it puts the failures of the earlier deliveries of the same envelope
        (``ingest_delivery_failures``) in front."""
        ev = final.ev
        if final.publish is not None and final.publish.failures:
            failures = publish_failures(final.publish, at=self.now, attempt=1,
                                        delivery=ev.receipt.delivered)
        else:
            stage = next((log.stage for log in ev.logs if log.status == "failed"), "ingress")
            failures = [{"at": self.now.isoformat(), "stage": stage, "code": final.error_code,
                         "message": final.error_message, "attempt": 1}]
        receipt = ev.receipt
        # JSON as text: a list inside a jsonb[] parameter would read as another array dimension.
        return (
            message_id, ev.parts.tenant if ev.parts else None, text(receipt.subject),
            orjson.dumps({text(k): text(v) for k, v in (receipt.headers or {}).items()}).decode(),
            receipt.data, final.error_code or PUBLISH_FAILED, orjson.dumps(failures).decode(),
            ev.key, ev.binding.version_text if ev.binding is not None else None,
        )

    def add_duplicate(self, ev: Evaluation, owner_id: int) -> None:
        """The ``duplicate`` row recording a dedupe hit on ``owner_id``'s key."""
        receipt, device, env = ev.receipt, ev.device, ev.envelope
        self.duplicates.append((
            owner_id, receipt.stream_seq, receipt.received_at, text(receipt.subject),
            receipt.traceparent, len(receipt.data),
            device.tenant_id if device else None, device.id if device else None,
            env.ts if env else None, env.seq if env else None,
        ))


def publish_failures(publish: PublishOutcome, *, at: datetime, attempt: int,
                     delivery: int | None = None) -> list[dict[str, Any]]:
    """A failed publish as dead-letter failure entries, one per sink that failed.

    ``attempt`` is the processing pass (1 when consumed, +1 per redrive); ``delivery`` the
    JetStream delivery within pass 1 (a redrive has none).
    """
    out: list[dict[str, Any]] = []
    for f in publish.failures:
        entry: dict[str, Any] = {"at": at.isoformat(), "stage": "publish", "code": f.code,
                                 "message": f"{f.sink}: {f.message}", "attempt": attempt,
                                 "tries": f.attempts}
        if delivery is not None:
            entry["delivery"] = delivery
        out.append(entry)
    return out


def delivery_failure_row(ev: Evaluation, publish: PublishOutcome,
                         at: datetime) -> tuple[str, int, str]:
    """The ``ingest_delivery_failures`` row of a delivery whose publish failed and that is
    nak'ed for another: (dedupe key, delivery, failures as JSON text)."""
    failures = publish_failures(publish, at=at, attempt=1, delivery=ev.receipt.delivered)
    return ev.key, ev.receipt.delivered, orjson.dumps(failures).decode()


def hot_state_order(ts_us: int, seq: int | None) -> str:
    """The measurement order of an envelope as a fixed-width string (compared byte-wise).

    ``ts`` first, then ``seq`` (absent sorts first), so "newest measurement wins" is a plain
    string comparison in Redis that cannot lose precision the way Lua's doubles would.
    """
    return f"{ts_us:020d}.{0 if seq is None else seq + 1:020d}"
