"""The observer seam: what the pipeline and the engine report, and to whom.

These are plain Protocols and frozen value objects with no third-party imports, so the ingest
pipeline and the job engine depend on this module only, never on the metrics library. An
observer is called synchronously on the event loop and must be cheap: it updates in-memory
counters and returns (:mod:`streams.observability.observers` is the Prometheus implementation).

The hot path reports once per *batch* (:class:`IngestBatchStats` carries every per-envelope
figure of the batch at once, latencies included), never once per envelope.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: importing them at run time would bring nats and asyncpg
    from streams.observability.liveness import Heartbeat
    from streams.observability.readiness import Check

NO_ERROR = ""
"""The ``error_code`` of an outcome that is not a failure."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestBatchStats:
    """Everything one ingest batch did, handed to :meth:`BatchObserver.on_batch` once."""

    size: int
    """Envelopes delivered in this batch (redeliveries included)."""
    duration_s: float
    """As the pipeline hands it over (``run_consumer``'s ``on_batch``): its own processing time;
    as the observer sees it: from the fetch returning to the acks being sent."""
    statuses: Mapping[str, int] = field(default_factory=dict)
    """Statuses recorded by this batch (new rows and duplicate rows)."""
    already_recorded: int = 0
    """Redeliveries of envelopes that already had their status (acked, nothing written)."""
    retried: int = 0
    """Envelopes negatively acknowledged for redelivery."""
    dead_lettered: int = 0
    """Dead letters created (all reasons: :attr:`dead_letters` splits them)."""
    outcomes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """``statuses`` split by error code: ``(status, error_code)`` → envelopes; ``error_code``
    is :data:`NO_ERROR` when the status is not a failure."""
    stored_at_ns: Sequence[int] = ()
    """Per envelope: when JetStream stored it (epoch ns). With :attr:`acked_ns` these give
    the end-to-end latency, which the observer works out for the whole batch in one
    vectorised step: a per-envelope loop here would be the hot path's one per-envelope cost."""
    finished_at_ns: int = 0
    """When the pipeline decided the batch's outcome, just before the acks (epoch ns)."""
    acked_ns: int = 0
    """When the batch's acks were sent (epoch ns; set by the consumer for the observer)."""
    redelivered: int = 0
    """Envelopes delivered more than once (JetStream's delivery count above 1)."""
    naks: Mapping[str, int] = field(default_factory=dict)
    """Envelopes negatively acknowledged for a later redelivery, by reason (an error code)."""
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    """Dead letters created, by reason code."""
    publish_attempts: Mapping[str, int] = field(default_factory=dict)
    """Tries of each publish side effect, by sink (``hot_state``, ``analytics``)."""
    publish_failures: Mapping[str, int] = field(default_factory=dict)
    """Failed tries, by sink."""
    dedupe_hits: int = 0
    """Envelopes the dedupe lookup found already recorded."""
    registry_hits: int = 0
    """Device lookups answered by the registry cache."""
    registry_misses: int = 0
    """Device lookups that went to Postgres."""
    phases_s: Mapping[str, float] = field(default_factory=dict)
    """Seconds of each phase of the batch: ``prepare`` (registry, pure stages, dedupe read),
    ``hot_state`` and ``analytics`` (the two sinks, concurrently), ``record`` (the recording
    transaction). A phase the batch did not reach (nothing to publish, a failure) is absent."""


class BatchObserver(Protocol):
    """Told about every ingest batch (the pipeline's ``on_batch`` hook)."""

    def on_batch(self, stats: IngestBatchStats) -> None:
        """Record one batch; called once per batch after its acks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobEvent:
    """Which job attempt an event is about (ids go to logs and traces, never to metric labels)."""

    job_id: uuid.UUID
    run_id: uuid.UUID
    job_type: str
    attempt: int
    worker_id: str


class JobObserver(Protocol):
    """Told about each step of a job's life by the job engine."""

    def on_claim(self, job: JobEvent) -> None:
        """A worker claimed the job and is about to run attempt ``job.attempt``."""

    def on_complete(self, job: JobEvent, *, duration_s: float) -> None:
        """The attempt succeeded."""

    def on_fail(self, job: JobEvent, *, duration_s: float, error_code: str) -> None:
        """The attempt failed and the job will not be retried."""

    def on_retry_scheduled(
        self, job: JobEvent, *, duration_s: float, error_code: str, delay_s: float
    ) -> None:
        """The attempt failed and the job waits ``delay_s`` for another one."""

    def on_cancelled(self, job: JobEvent, *, duration_s: float) -> None:
        """The attempt stopped because its run was cancelled."""

    def on_reap(self, *, job_type: str, count: int) -> None:
        """The reaper released ``count`` stale locks of ``job_type`` jobs."""

    def on_heartbeat(self, *, worker_id: str, running: int) -> None:
        """A worker's heartbeat round succeeded for its ``running`` jobs."""

    def on_heartbeat_lost(self, job: JobEvent) -> None:
        """A heartbeat found the job no longer locked by this worker (it was reaped)."""

    def on_run_finished(self, *, status: str, upload_to_publish_s: float | None) -> None:
        """A run reached a final status; ``upload_to_publish_s`` is set when it published."""


class IntakeObserver(Protocol):
    """Told about each session notice the intake consumer handles."""

    def on_notice(self, *, outcome: str) -> None:
        """One notice handled: ``planned`` (a new run), ``duplicate`` (its run existed),
        ``rejected`` (dead-lettered) or ``deferred`` (nak'ed for a later redelivery)."""

    def on_dead_letter(self, *, code: str) -> None:
        """A notice was dead-lettered (stored in SESSIONS_DLQ) with error ``code``."""


class AuthObserver(Protocol):
    """Told about each connection the auth-callout service answers for nats-server and each
    device connection it closes (``streams.identity.callout``)."""

    def on_request(self, *, result: str, reason: str, seconds: float) -> None:
        """One authorization request answered: ``granted`` or ``refused``, and why."""

    def on_disconnect(self, *, why: str, connections: int) -> None:
        """Device connections closed: ``notified`` (a revocation was announced) or
        ``sweep`` (the periodic check found them)."""

    def on_unauthenticated(self, *, messages: int) -> None:
        """Messages published by connections the open broker let in without credentials."""


class RetentionObserver(Protocol):
    """Told about each partition the maintenance leader archives before dropping it
    (``streams.retention.archive``)."""

    def on_archive(self, *, tier: str, outcome: str, rows: int) -> None:
        """``archived`` (``rows`` exported, verified, recorded, then the partition dropped)
        or ``failed`` (nothing dropped: the partition was kept)."""


class RelayObserver(Protocol):
    """Told what the domain-event relay does (``streams.domain_events.relay``)."""

    def on_relayed(self, *, delays_s: Sequence[float]) -> None:
        """A round published these events; each one's delay from its change to the stream's
        acknowledgement."""

    def on_backlog(self, *, age_s: float) -> None:
        """After each round: the age of the oldest event not yet relayed (0: none)."""


class ProcessHooks(Protocol):
    """What a long-running component (ingest, intake, worker, API) reports to its process.

    A component receives one of these from the command that runs it (``None``: nothing is
    watching, as in most tests) and, once its connections are open, registers its readiness
    checks and its main loop's heartbeat; then it reports events to the observers. The
    Prometheus side is :class:`streams.observability.process.ProcessObservability`; the
    component never sees a metric.
    """

    @property
    def batches(self) -> BatchObserver:
        """Told about every ingest batch."""

    @property
    def jobs(self) -> JobObserver:
        """Told about each step of every job attempt."""

    @property
    def intake(self) -> IntakeObserver:
        """Told about each session notice."""

    @property
    def retention(self) -> RetentionObserver:
        """Told about each partition archived before its drop."""

    @property
    def auth(self) -> AuthObserver:
        """Told about each authorization request and forced disconnect."""

    @property
    def relay(self) -> RelayObserver:
        """Told about each round of the domain-event relay."""

    def ready(self, component: str, *checks: Check) -> None:
        """``component`` is connected: from now on ``/readyz`` runs ``checks`` for it."""

    async def stopping(self, component: str) -> None:
        """``component`` is about to close its connections: ``/readyz`` stops running its
        checks (this returns once none is still running) and fails, naming it."""

    def heartbeat(self, name: str) -> Heartbeat:
        """A heartbeat that ``/livez`` watches; the component ticks it once per turn."""

    def sample_consumer(self, nc: Any, *, stream: str, durable: str) -> None:
        """Sample a JetStream consumer's pending counts every ``sample_interval_s`` (``nc``:
        the component's NATS client)."""

    def sample_job_queue(self, pool: Any) -> None:
        """Sample the job queue depth and worker heartbeat ages every ``sample_interval_s``."""

    def http_middleware(self) -> Any:
        """The aiohttp middleware that counts and times API requests."""
