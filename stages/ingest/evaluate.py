"""Run one envelope through ingress → validate → mutate → derive, without I/O.

The result, an :class:`Evaluation`, says how the envelope ends *if* it turns out to be new
(the batch's dedupe check decides that afterwards): its final status and error, the
telemetry row it produces, whether it must be published, whether it is dead-lettered, and a
:class:`StageLog` for every stage it reached. Persist and publish are batch operations; the
batch writer adds their logs.

Early termination (spec 001), each with a stable error code:

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

The clock is an argument (``clock() -> ns``) so durations are measured without the stage
reading the time itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

from stages.ingest.derive import derive
from stages.ingest.ingress import (
    DecodedEnvelope,
    EnvelopeError,
    Receipt,
    SubjectParts,
    check_size,
    decode_envelope,
    dedupe_key,
    parse_subject,
)
from stages.ingest.mutate import mutate
from stages.ingest.processing_state import ProcessingState
from stages.ingest.program import TopicProgram
from stages.ingest.status import Status
from stages.ingest.validate import Issue, validate

UNKNOWN_DEVICE = "UNKNOWN_DEVICE"
NO_SCHEMA_VERSION = "DEVICE_NO_SCHEMA_VERSION"
UNKNOWN_TOPIC = "UNKNOWN_TOPIC"
VALIDATION_FAILED = "VALIDATION_FAILED"
DEVICE_INACTIVE = "DEVICE_INACTIVE"
INTERNAL_ERROR = "INTERNAL_ERROR"

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


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicBinding:
    """A topic of one schema version, compiled."""

    schema_version_id: UUID
    schema_topic_id: UUID
    program: TopicProgram


@dataclass(frozen=True, kw_only=True, slots=True)
class Registry:
    """The lookups one batch needs, prefetched by the runtime."""

    devices: Mapping[tuple[str, str], DeviceRecord]
    """``(tenant, external_id)`` → device (absent: unknown)."""
    topics: Mapping[tuple[UUID, str], TopicBinding]
    """``(schema_version_id, topic name)`` → compiled topic (absent: unknown topic)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """How one envelope ends if it is new (see the module docstring)."""

    receipt: Receipt
    key: str
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
) -> Evaluation:
    """Evaluate one envelope; never raises (a bug becomes ``INTERNAL_ERROR``)."""
    parts = parse_subject(receipt.subject, prefix)
    key = dedupe_key(parts.tenant if parts else "?", receipt)
    run = _Run(receipt, key, parts, capture, clock)
    try:
        return run.go(registry, max_payload_bytes)
    except Exception as exc:  # a poison envelope must not stop its batch
        return run.end(
            Status.FAILED_TERMINAL, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}",
            stage_failed=run.stage, dead_letter=True,
        )


class _Run:
    """The mutable bookkeeping of one evaluation (logs, timing, what is known so far)."""

    def __init__(
        self, receipt: Receipt, key: str, parts: SubjectParts | None, capture: bool, clock: Clock
    ) -> None:
        self.receipt, self.key, self.parts, self.capture, self.clock = (
            receipt, key, parts, capture, clock,
        )
        self.logs: list[StageLog] = []
        self.stage = "ingress"
        self.t = clock()
        self.device: DeviceRecord | None = None
        self.binding: TopicBinding | None = None
        self.envelope: DecodedEnvelope | None = None
        self.issues: tuple[Issue, ...] = ()

    def log(self, stage: str, inp: Any = None, out: Any = None, *, failed: Issue | None = None,
            code: str | None = None, message: str | None = None) -> None:
        now = self.clock()
        if failed is not None:
            code, message = failed.code, failed.message
        self.logs.append(StageLog(
            stage, "ok" if code is None else "failed", (now - self.t) // 1000, code, message,
            inp if self.capture else None, out if self.capture else None,
        ))
        self.t = now

    def end(self, status: Status, code: str | None, message: str | None, *,
            state: ProcessingState | None = None, values: dict[str, Any] | None = None,
            stage_failed: str | None = None, dead_letter: bool = False) -> Evaluation:
        if stage_failed is not None:
            self.log(stage_failed, code=code, message=message)
        return Evaluation(
            receipt=self.receipt, key=self.key, parts=self.parts, status=status,
            error_code=code, error_message=message, device=self.device, binding=self.binding,
            envelope=self.envelope, state=state, values=values, issues=self.issues,
            logs=tuple(self.logs), dead_letter=dead_letter,
        )

    def go(self, registry: Registry, max_payload_bytes: int) -> Evaluation:
        receipt, parts = self.receipt, self.parts
        ingress_in = {"subject": receipt.subject, "msg_id": receipt.msg_id,
                      "payload_bytes": len(receipt.data)}
        try:
            check_size(receipt, max_payload_bytes)
            if parts is None:
                raise EnvelopeError(f"subject {receipt.subject!r} is not "
                                    "telemetry.<tenant>.<device>.<topic>", code="SUBJECT_INVALID")
            envelope = self.envelope = decode_envelope(receipt.data)
        except EnvelopeError as exc:
            self.log("ingress", ingress_in, code=exc.code, message=exc.message)
            return self.end(Status.FAILED_TERMINAL, exc.code, exc.message, dead_letter=True)
        device = self.device = registry.devices.get((parts.tenant, parts.device))
        if device is None:
            return self.end(Status.FAILED_TERMINAL, UNKNOWN_DEVICE,
                            f"no device {parts.device!r} in tenant {parts.tenant!r}",
                            stage_failed="ingress")
        if device.schema_version_id is None:
            return self.end(Status.FAILED_TERMINAL, NO_SCHEMA_VERSION,
                            f"device {parts.device!r} has no schema version assigned",
                            stage_failed="ingress")
        binding = self.binding = registry.topics.get((device.schema_version_id, parts.topic))
        if binding is None:
            return self.end(Status.FAILED_TERMINAL, UNKNOWN_TOPIC,
                            f"topic {parts.topic!r} is not in the device's schema version",
                            stage_failed="ingress")
        program = binding.program
        self.log("ingress", ingress_in, {
            "device_id": str(device.id), "schema_version_id": str(binding.schema_version_id),
            "schema_version_topic_id": str(binding.schema_topic_id)})

        self.stage = "validate"
        checked = validate(program, envelope.values)
        self.issues = checked.issues
        extracted = checked.extracted
        validate_out = {"extracted_values": extracted, "issues": issues_json(checked.issues)}
        if not checked.ok:
            message = _failing(checked.issues)
            self.log("validate", envelope.values, validate_out, code=VALIDATION_FAILED,
                     message=message)
            return self.end(Status.FAILED_VALIDATION, VALIDATION_FAILED, message,
                            state=ProcessingState.INVALID, values=extracted)
        self.log("validate", envelope.values, validate_out)
        if not device.active:
            return self.end(Status.INACTIVE_SKIPPED, DEVICE_INACTIVE,
                            f"device {parts.device!r} is inactive",
                            state=ProcessingState.INACTIVE_SKIPPED, values=extracted)

        self.stage = "mutate"
        mutated = mutate(program, extracted)
        self.log("mutate", extracted, {"mutated_values": mutated.values,
                                       "change_set": mutated.change_set}, failed=mutated.error)
        if mutated.error is not None:
            return self._expression_failed(mutated.error, mutated.values)

        self.stage = "derive"
        derived = derive(program, mutated.values)
        self.log("derive", mutated.values, {"derived_values": derived.derived,
                                            "final_values": derived.final}, failed=derived.error)
        if derived.error is not None:
            return self._expression_failed(derived.error, derived.final)
        return self.end(Status.COMPLETED, None, None, state=ProcessingState.PROCESSED,
                        values=derived.final)

    def _expression_failed(self, error: Issue, values: dict[str, Any]) -> Evaluation:
        self.issues = (*self.issues, error)
        return self.end(Status.FAILED_VALIDATION, error.code, error.message,
                        state=ProcessingState.INVALID, values=values)
