"""Run one envelope through ingress → validate → mutate → derive, without I/O.

The result, an :class:`Evaluation`, says how the envelope ends *if* it turns out to be new
(the batch's dedupe check decides that afterwards): its final status and error, the
telemetry row it produces, whether it must be published, whether it is dead-lettered, and a
:class:`StageLog` for every stage it reached. Persist and publish are batch operations; the
batch writer adds their logs.

Early termination (spec 001), each with a stable error code (the three ``ENVELOPE_*`` ones
still name the registered device their subject names, if any):

=======================  ==================================  ===================  ===========
path                     code                                status               dead letter
=======================  ==================================  ===================  ===========
oversized payload        ``ENVELOPE_TOO_LARGE``              failed_terminal      yes
not JSON / not object    ``ENVELOPE_UNPARSEABLE``            failed_terminal      yes
breaks the wire contract ``ENVELOPE_INVALID``                failed_terminal      yes
unknown tenant/device    ``UNKNOWN_DEVICE``                  failed_terminal      no
device has no schema     ``DEVICE_NO_SCHEMA_VERSION``        failed_terminal      no
topic not in its schema  ``UNKNOWN_TOPIC``                   failed_terminal      no
required/critical check  ``VALIDATION_FAILED``               failed_validation    no
expression failed        the ``EVAL_*`` code                 failed_validation    no
device inactive          ``DEVICE_INACTIVE``                 inactive_skipped     no
a bug in a stage         ``INTERNAL_ERROR``                  failed_terminal      yes
=======================  ==================================  ===================  ===========

A number too large for a 64-bit float (``1e309``) is JSON, so it is not unparseable: in
``values`` it is a bad value of the parameter reading it (``NUMBER_TOO_LARGE``, which the
required/critical rules weigh like any other), in ``ts`` or ``seq`` it breaks the contract.

Messages name the parameter, the stage and the kind of failure, never an envelope's value (spec
000 §15); a bug is recorded by its exception's class and place (:func:`schemas.errors.unexpected`).

The clock is an argument (``clock() -> ns``) so durations are measured without the stage
reading the time itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from uuid import UUID

import orjson

from schemas import error_codes as codes
from schemas.errors import unexpected
from stages.ingest.derive import derive
from stages.ingest.ingress import (
    DecodedEnvelope,
    EnvelopeError,
    Receipt,
    SubjectParts,
    check_size,
    decode_envelope,
    dedupe_key,
    key_hash,
    parse_subject,
)
from stages.ingest.mutate import mutate
from stages.ingest.processing_state import ProcessingState
from stages.ingest.status import Status
from stages.ingest.topic_program import TopicProgram
from stages.ingest.validate import Issue, validate

UNKNOWN_DEVICE = codes.UNKNOWN_DEVICE
NO_SCHEMA_VERSION = codes.DEVICE_NO_SCHEMA_VERSION
UNKNOWN_TOPIC = codes.UNKNOWN_TOPIC
VALIDATION_FAILED = codes.VALIDATION_FAILED
DEVICE_INACTIVE = codes.DEVICE_INACTIVE
INTERNAL_ERROR = codes.INTERNAL_ERROR

Clock = Callable[[], int]


class StageLog(NamedTuple):
    """One stage reached by one envelope (a row of ``ingestion_stage_logs``, minus ids)."""

    stage: str
    status: str  # "ok" | "failed"
    duration_us: int
    error_code: str | None = None
    error_message: str | None = None
    input_snapshot: Any = None
    output_snapshot: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceRecord:
    """The registry's view of one device, as the consumer caches it."""

    id: UUID
    tenant_id: UUID
    tenant: str
    external_id: str
    active: bool
    schema_version_id: UUID | None
    # Text forms, made once per cached device rather than once per envelope.
    id_text: str = field(init=False, compare=False)
    tenant_id_text: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id_text", str(self.id))
        object.__setattr__(self, "tenant_id_text", str(self.tenant_id))


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicBinding:
    """A topic of one schema version, compiled."""

    schema_version_id: UUID
    schema_topic_id: UUID
    program: TopicProgram
    version_text: str = field(init=False, compare=False)
    topic_id_text: str = field(init=False, compare=False)
    unit_names: tuple[str, ...] = field(init=False, compare=False)
    """The topic's parameter names, in program order (the analytics sink's unit lookup)."""
    unit_values: tuple[str, ...] = field(init=False, compare=False)
    """The unit of each of :attr:`unit_names` (``""`` when none)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "version_text", str(self.schema_version_id))
        object.__setattr__(self, "topic_id_text", str(self.schema_topic_id))
        parameters = self.program.parameters
        object.__setattr__(self, "unit_names", tuple(p.name for p in parameters))
        object.__setattr__(self, "unit_values", tuple(p.unit or "" for p in parameters))


@dataclass(frozen=True, kw_only=True, slots=True)
class Registry:
    """The lookups one batch needs, prefetched by the runtime."""

    devices: Mapping[tuple[str, str], DeviceRecord]
    """``(tenant, external_id)`` → device (absent: unknown)."""
    topics: Mapping[tuple[UUID, str], TopicBinding]
    """``(schema_version_id, topic name)`` → compiled topic (absent: unknown topic)."""


class Evaluation(NamedTuple):
    """How one envelope ends if it is new (see the module docstring).

    A ``NamedTuple`` rather than a frozen dataclass: one is made per envelope on the hot path,
    and a tuple is several times cheaper to build while just as immutable.
    """

    receipt: Receipt
    key: str
    key_digest: str
    """``key_hash(key)``, computed once: the dedupe read and the recording both use it."""
    parts: SubjectParts | None
    status: Status
    """Final status; ``COMPLETED`` means "once publish succeeds"."""
    error_code: str | None
    error_message: str | None
    device: DeviceRecord | None
    binding: TopicBinding | None
    envelope: DecodedEnvelope | None
    state: ProcessingState | None
    """The telemetry row's state (``None``: the envelope makes no telemetry row)."""
    values: dict[str, Any] | None
    values_json: str | None
    """``values`` as JSON, encoded once for the telemetry row, hot state and analytics."""
    issues: tuple[Issue, ...]
    logs: tuple[StageLog, ...]
    dead_letter: bool

    @property
    def needs_publish(self) -> bool:
        return self.status is Status.COMPLETED


def issues_json(issues: tuple[Issue, ...]) -> list[dict[str, Any]] | None:
    """Issues as stored in ``device_telemetry_logs.validation_issues``."""
    if not issues:
        return None
    return [
        {"parameter": i.parameter, "code": i.code, "message": i.message, "critical": i.critical}
        for i in issues
    ]


def _failing(issues: tuple[Issue, ...]) -> str:
    return "; ".join(i.message for i in issues if i.critical) or "validation failed"


def evaluate(
    receipt: Receipt,
    registry: Registry,
    *,
    prefix: str,
    max_payload_bytes: int,
    capture: bool,
    clock: Clock,
    parts: SubjectParts | Literal[False] | None = False,
) -> Evaluation:
    """Evaluate one envelope; never raises (a bug becomes ``INTERNAL_ERROR``).

    ``parts`` is the parsed subject when the caller has it already (``False``: parse here).

    Almost every envelope passes every stage, so that path runs straight through with the
    least bookkeeping; the first sign of anything else (a malformed envelope, an unknown or
    inactive device, a failed check, snapshots wanted, an exception) hands the envelope to
    :func:`evaluate_fully`, which evaluates it again from the start and records each stage.
    The stages are pure, so both give the same result (a test checks they agree).

    On that path the topic's :class:`~stages.ingest.topic_program.FastPath` runs validate, mutate
    and derive when the envelope is clean (no issue at all), building one dict and updating
    it in place instead of three result objects and two copies; an envelope it declines (say
    one with a non-critical issue) goes through the general stages (:func:`_general_stages`)
    before it would go to :func:`evaluate_fully`. Either way the clock is read between stages,
    so each :class:`StageLog` carries its own stage's measured duration (the logs themselves
    come ready-made from :func:`_passed`). The ``Evaluation`` is built with ``tuple.__new__``,
    which skips the Python-level ``__new__`` a ``NamedTuple`` call goes through (the field
    order is the class's, as the agreement tests check).
    """
    if parts is False:
        parts = parse_subject(receipt.subject, prefix)
    if capture or parts is None or len(receipt.data) > max_payload_bytes:
        return evaluate_fully(receipt, registry, parts=parts, max_payload_bytes=max_payload_bytes,
                              capture=capture, clock=clock)
    try:
        t0 = clock()
        envelope = decode_envelope(receipt.data)
        device = registry.devices.get((parts.tenant, parts.device))
        if device is not None and device.active and device.schema_version_id is not None:
            binding = registry.topics.get((device.schema_version_id, parts.topic))
            if binding is not None:
                program = binding.program
                fast = program.fast
                t1 = clock()
                final: dict[str, Any] | None = None
                if fast is not None and (final := fast.validate(envelope.values)) is not None:
                    t2 = clock()
                    fast.mutate(final)
                    t3 = clock()
                    fast.derive(final)
                    t4 = clock()
                    issues: tuple[Issue, ...] = ()
                elif (general := _general_stages(program, envelope.values, clock)) is not None:
                    final, issues, t2, t3, t4 = general
                if final is not None:
                    key = dedupe_key(parts.tenant, receipt)
                    return _new(Evaluation, (
                        receipt, key, key_hash(key), parts, _COMPLETED, None,
                        None, device, binding, envelope, _PROCESSED, final,
                        orjson.dumps(final).decode(), issues,
                        _passed((t1 - t0) // 1000, (t2 - t1) // 1000, (t3 - t2) // 1000,
                                (t4 - t3) // 1000),
                        False,
                    ))
    except Exception:  # anything unusual is the full evaluation's business
        pass
    return evaluate_fully(receipt, registry, parts=parts, max_payload_bytes=max_payload_bytes,
                          capture=capture, clock=clock)


_new = tuple.__new__
_COMPLETED = Status.COMPLETED
_PROCESSED = ProcessingState.PROCESSED
_SHARED_US = 1024
_INGRESS_OK, _VALIDATE_OK, _MUTATE_OK, _DERIVE_OK = (
    tuple(StageLog(stage, "ok", us) for us in range(_SHARED_US))
    for stage in ("ingress", "validate", "mutate", "derive"))


def _passed(ingress: int, validate: int, mutate: int, derive: int) -> tuple[StageLog, ...]:
    """The logs of the four stages of a completed envelope, given their durations in µs.

    A passed stage's log is fully determined by its stage and duration, and a tuple is
    immutable, so the logs of durations under ``_SHARED_US`` µs (nearly all) are made once and
    shared by every envelope instead of being allocated four times per envelope.
    """
    if (0 <= ingress < _SHARED_US and 0 <= validate < _SHARED_US and 0 <= mutate < _SHARED_US
            and 0 <= derive < _SHARED_US):
        return (_INGRESS_OK[ingress], _VALIDATE_OK[validate], _MUTATE_OK[mutate],
                _DERIVE_OK[derive])
    return tuple(_new(StageLog, (stage, "ok", us, None, None, None, None)) for stage, us in
                 (("ingress", ingress), ("validate", validate), ("mutate", mutate),
                  ("derive", derive)))


def _general_stages(
    program: TopicProgram, values: dict[str, Any], clock: Clock
) -> tuple[dict[str, Any], tuple[Issue, ...], int, int, int] | None:
    """Validate, mutate and derive with the general stages, when all three succeed.

    Returns the final values, the (non-failing) issues, and the clock read after each stage;
    ``None`` when a stage fails, which is :func:`evaluate_fully`'s to report.
    """
    checked = validate(program, values)
    if not checked.ok:
        return None
    t2 = clock()
    mutated = mutate(program, checked.extracted)
    if mutated.error is not None:
        return None
    t3 = clock()
    derived = derive(program, mutated.values)
    if derived.error is not None:
        return None
    return derived.final, checked.issues, t2, t3, clock()


def evaluate_fully(
    receipt: Receipt,
    registry: Registry,
    *,
    parts: SubjectParts | None,
    max_payload_bytes: int,
    capture: bool,
    clock: Clock,
) -> Evaluation:
    """Evaluate one envelope stage by stage, recording where and why it stops."""
    key = dedupe_key(parts.tenant if parts else "?", receipt)
    logs: list[StageLog] = []
    device: DeviceRecord | None = None
    binding: TopicBinding | None = None
    envelope: DecodedEnvelope | None = None
    issues: tuple[Issue, ...] = ()
    stage = "ingress"
    t = clock()

    def end(status: Status, code: str | None, message: str | None,
            state: ProcessingState | None = None, values: dict[str, Any] | None = None,
            dead_letter: bool = False) -> Evaluation:
        return Evaluation(
            receipt, key, key_hash(key), parts, status, code, message, device, binding,
            envelope, state, values, None if values is None else orjson.dumps(values).decode(),
            issues, tuple(logs), dead_letter,
        )

    def failed(code: str, message: str) -> None:
        logs.append(StageLog(stage, "failed", (clock() - t) // 1000, code, message))

    try:
        ingress_in = {"subject": receipt.subject, "msg_id": receipt.msg_id,
                      "payload_bytes": len(receipt.data)} if capture else None
        try:
            check_size(receipt, max_payload_bytes)
            if parts is None:
                raise EnvelopeError(f"subject {receipt.subject!r} is not "
                                    "telemetry.<tenant>.<device>.<topic>", code="SUBJECT_INVALID")
            envelope = decode_envelope(receipt.data)
        except EnvelopeError as exc:
            logs.append(StageLog("ingress", "failed", (clock() - t) // 1000, exc.code,
                                 exc.message, ingress_in))
            # A malformed envelope on a registered device's subject is that device's: its
            # row carries the tenant and device (not the schema version or topic, which only
            # a readable body reaches), so its data quality and the fleet's totals count it.
            if parts is not None:
                device = registry.devices.get((parts.tenant, parts.device))
            return end(Status.FAILED_TERMINAL, exc.code, exc.message, dead_letter=True)
        device = registry.devices.get((parts.tenant, parts.device))
        if device is None:
            message = f"no device {parts.device!r} in tenant {parts.tenant!r}"
            failed(UNKNOWN_DEVICE, message)
            return end(Status.FAILED_TERMINAL, UNKNOWN_DEVICE, message)
        if device.schema_version_id is None:
            message = f"device {parts.device!r} has no schema version assigned"
            failed(NO_SCHEMA_VERSION, message)
            return end(Status.FAILED_TERMINAL, NO_SCHEMA_VERSION, message)
        binding = registry.topics.get((device.schema_version_id, parts.topic))
        if binding is None:
            message = f"topic {parts.topic!r} is not in the device's schema version"
            failed(UNKNOWN_TOPIC, message)
            return end(Status.FAILED_TERMINAL, UNKNOWN_TOPIC, message)
        program = binding.program
        now = clock()
        logs.append(StageLog("ingress", "ok", (now - t) // 1000, None, None, ingress_in, {
            "device_id": device.id_text, "schema_version_id": binding.version_text,
            "schema_version_topic_id": binding.topic_id_text} if capture else None))
        t = now

        stage = "validate"
        checked = validate(program, envelope.values)
        issues = checked.issues
        extracted = checked.extracted
        now = clock()
        out = {"extracted_values": extracted, "issues": issues_json(issues)} if capture else None
        inp = envelope.values if capture else None
        if not checked.ok:
            message = _failing(issues)
            logs.append(StageLog("validate", "failed", (now - t) // 1000, VALIDATION_FAILED,
                                 message, inp, out))
            return end(Status.FAILED_VALIDATION, VALIDATION_FAILED, message,
                       ProcessingState.INVALID, extracted)
        logs.append(StageLog("validate", "ok", (now - t) // 1000, None, None, inp, out))
        t = now
        if not device.active:
            return end(Status.INACTIVE_SKIPPED, DEVICE_INACTIVE,
                       f"device {parts.device!r} is inactive", ProcessingState.INACTIVE_SKIPPED,
                       extracted)

        stage = "mutate"
        mutated = mutate(program, extracted)
        now = clock()
        error = mutated.error
        logs.append(StageLog(
            "mutate", "ok" if error is None else "failed", (now - t) // 1000,
            None if error is None else error.code, None if error is None else error.message,
            extracted if capture else None,
            {"mutated_values": mutated.values, "change_set": mutated.change_set}
            if capture else None))
        t = now
        if error is not None:
            issues = (*issues, error)
            return end(Status.FAILED_VALIDATION, error.code, error.message,
                       ProcessingState.INVALID, mutated.values)

        stage = "derive"
        derived = derive(program, mutated.values)
        now = clock()
        error = derived.error
        logs.append(StageLog(
            "derive", "ok" if error is None else "failed", (now - t) // 1000,
            None if error is None else error.code, None if error is None else error.message,
            mutated.values if capture else None,
            {"derived_values": derived.derived, "final_values": derived.final}
            if capture else None))
        if error is not None:
            issues = (*issues, error)
            return end(Status.FAILED_VALIDATION, error.code, error.message,
                       ProcessingState.INVALID, derived.final)
        return end(Status.COMPLETED, None, None, ProcessingState.PROCESSED, derived.final)
    except Exception as exc:  # a poison envelope must not stop its batch
        message = f"{stage}: {unexpected(exc)}"
        failed(INTERNAL_ERROR, message)
        return end(Status.FAILED_TERMINAL, INTERNAL_ERROR, message, dead_letter=True)
