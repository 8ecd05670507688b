"""Every metric Tideway exports, defined once, in a registry of its own.

Names follow Prometheus conventions: the ``tideway_`` prefix, the unit in the name
(``_seconds``), ``_total`` on counters. Label sets are bounded: statuses, error codes, job
types, sinks, routes — never a device id, message id, job id or run id (those go to logs and
traces). The one exception with an open set is ``worker_id`` on the heartbeat-age gauge, which
the sampler rewrites on every pass so a worker that is gone drops out.

:class:`Metrics` owns a :class:`~prometheus_client.CollectorRegistry` instead of using the
library's global default, so a test (or two processes in one interpreter, as ``tideway up``
runs them) can each have their own. :meth:`Metrics.catalogue` lists every metric with its type,
labels and meaning; ``docs/operating.md`` is generated from it and a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector

from streams.observability.bulk_histogram import BulkHistogram

PREFIX = "tideway_"

BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
JOB_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
UPLOAD_TO_PUBLISH_BUCKETS = (1.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0, 300.0)
AUTH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
"""An authorization answer takes about a millisecond when idle; nats-server gives up after
its auth timeout (2 s by default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricInfo:
    """One metric as an operator sees it in the exposition."""

    name: str
    """The exposed name (a counter's includes ``_total``; a histogram's is the base name)."""
    kind: str
    """``counter``, ``gauge`` or ``histogram``."""
    labels: tuple[str, ...]
    help: str

    def series_names(self) -> tuple[str, ...]:
        """The sample names PromQL can select for this metric."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)


class Metrics:
    """The metric objects, as attributes the observers and samplers update."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process: bool = True):
        """Create every metric on ``registry`` (a fresh one by default).

        ``process`` also registers prometheus-client's process collector (CPU, memory, open
        files of this process: ``process_*``).
        """
        self.registry = registry if registry is not None else CollectorRegistry()
        self._catalogue: list[MetricInfo] = []
        if process:
            ProcessCollector(registry=self.registry)

        # -- streaming ingest -------------------------------------------------------------
        self.envelopes = self._counter(
            "ingest_envelopes_total", "Envelopes recorded, by status and error code "
            "(empty when the status is not a failure).", ("status", "error_code"))
        self.batches = self._counter("ingest_batches_total", "Ingest batches processed.")
        self.batch_duration = self._histogram(
            "ingest_batch_duration_seconds", "Time from a fetch returning to its acks.",
            buckets=BATCH_BUCKETS)
        self.batch_phases = self._histogram(
            "ingest_batch_phase_seconds", "Time a batch spent in each phase: prepare (registry, "
            "stages, dedupe read), hot_state and analytics (the sinks, concurrently), record "
            "(the recording transaction).", ("phase",), buckets=BATCH_BUCKETS)
        self.end_to_end = BulkHistogram(
            PREFIX + "ingest_end_to_end_latency_seconds",
            "Per envelope: time from JetStream storing it to its ack.",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self._note("ingest_end_to_end_latency_seconds", "histogram", (),
                   self.end_to_end.documentation)
        self.redelivered = self._counter(
            "ingest_redelivered_envelopes_total",
            "Envelopes delivered more than once by JetStream.")
        self.naks = self._counter(
            "ingest_naks_total", "Envelopes negatively acknowledged for a later redelivery, "
            "by reason.", ("reason",))
        self.dead_letters = self._counter(
            "ingest_dead_letters_total", "Dead letters created, by reason code.", ("reason",))
        self.publish_attempts = self._counter(
            "ingest_publish_attempts_total", "Tries of a publish side effect, by sink.",
            ("sink",))
        self.publish_failures = self._counter(
            "ingest_publish_failures_total", "Failed tries of a publish side effect, by sink.",
            ("sink",))
        self.dedupe_hits = self._counter(
            "ingest_dedupe_hits_total", "Envelopes the dedupe lookup found already recorded.")
        self.registry_hits = self._counter(
            "ingest_registry_cache_hits_total", "Device lookups answered by the registry cache.")
        self.registry_misses = self._counter(
            "ingest_registry_cache_misses_total", "Device lookups that went to Postgres.")
        self.consumer_pending = self._gauge(
            "jetstream_consumer_pending_messages",
            "Envelopes in the stream not yet delivered to the consumer (sampled).",
            ("stream", "consumer"))
        self.consumer_ack_pending = self._gauge(
            "jetstream_consumer_ack_pending_messages",
            "Envelopes delivered to the consumer and not yet acknowledged (sampled).",
            ("stream", "consumer"))

        # -- batch jobs -------------------------------------------------------------------
        self.queue_depth = self._gauge(
            "job_queue_depth", "Jobs waiting or running, by job type and state (sampled).",
            ("job_type", "state"))
        self.job_duration = self._histogram(
            "job_duration_seconds", "Duration of a job attempt, by job type and outcome.",
            ("job_type", "outcome"), buckets=JOB_BUCKETS)
        self.job_attempts = self._counter(
            "job_attempts_total", "Job attempts finished, by job type, outcome and error code.",
            ("job_type", "outcome", "error_code"))
        self.job_claims = self._counter(
            "job_claims_total", "Jobs claimed by a worker, by job type.", ("job_type",))
        self.job_retries = self._counter(
            "job_retries_scheduled_total", "Failed attempts that scheduled another one, "
            "by job type.", ("job_type",))
        self.stale_locks = self._counter(
            "job_stale_locks_reaped_total", "Running jobs whose worker stopped heartbeating, "
            "released by the reaper, by job type.", ("job_type",))
        self.running_jobs = self._gauge(
            "worker_running_jobs", "Jobs this worker process is running, by job type.",
            ("job_type",))
        self.heartbeats = self._counter(
            "worker_heartbeats_total", "Heartbeat rounds a worker process completed.")
        self.heartbeats_lost = self._counter(
            "worker_heartbeats_lost_total", "Heartbeats that found their job taken from this "
            "worker (reaped), by job type.", ("job_type",))
        self.heartbeat_age = self._gauge(
            "worker_heartbeat_age_seconds", "Seconds since each worker's oldest running job "
            "last heartbeated (sampled from Postgres).", ("worker_id",))
        self.upload_to_publish = self._histogram(
            "session_upload_to_publish_seconds",
            "Time from a session upload to its run publishing (spec 000 §14's SLA).",
            buckets=UPLOAD_TO_PUBLISH_BUCKETS)
        self.runs_finished = self._counter(
            "runs_finished_total", "Processing runs that reached a final status, by status.",
            ("status",))
        # -- domain events (streams.domain_events) ------------------------------------------
        self.events_relayed = self._counter(
            "events_relayed_total", "Domain events the relay published from the Postgres "
            "outbox to the EVENTS stream.")
        self.event_relay_delay = self._histogram(
            "event_relay_delay_seconds", "Time from the change an event announces to the "
            "EVENTS stream acknowledging it.", buckets=RELAY_BUCKETS)
        self.event_relay_lag = self._gauge(
            "event_relay_lag_seconds", "Age of the oldest domain event not yet relayed to "
            "the EVENTS stream (0: none waiting; sampled after each relay round).")

        # -- retention ----------------------------------------------------------------------
        self.retention_archives = self._counter(
            "retention_archives_total", "Expired partitions the maintenance leader exported to "
            "Parquet before dropping them, by tier and outcome (archived; failed: the partition "
            "was kept).", ("tier", "outcome"))
        self.retention_archived_rows = self._counter(
            "retention_archived_rows_total", "Rows exported to Parquet archives before their "
            "partition was dropped, by tier.", ("tier",))

        # -- intake, API, process ---------------------------------------------------------
        self.intake_notices = self._counter(
            "intake_notices_total", "Session notices handled by intake, by outcome.",
            ("outcome",))
        self.session_dead_letters = self._counter(
            "session_dead_letters_total", "Session notices intake dead-lettered into "
            "SESSIONS_DLQ, by error code.", ("code",))
        self.api_requests = self._counter(
            "api_requests_total", "HTTP API requests, by route template, method and status.",
            ("route", "method", "status"))
        self.api_duration = self._histogram(
            "api_request_duration_seconds", "HTTP API request duration, by route template "
            "and method.", ("route", "method"), buckets=API_BUCKETS)
        # -- device identity (the auth-callout service, docs/security.md) ---------------------
        self.auth_requests = self._counter(
            "auth_requests_total", "Connections nats-server asked the auth service about, by "
            "result (granted, refused) and reason (device, anonymous, no_credentials, "
            "malformed, unknown, wrong_secret, wrong_user, revoked, inactive, bad_request, "
            "unavailable).", ("result", "reason"))
        self.auth_duration = self._histogram(
            "auth_request_duration_seconds", "Time from an authorization request's arrival to "
            "its answer.", buckets=AUTH_BUCKETS)
        self.auth_disconnects = self._counter(
            "auth_disconnects_total", "Device connections the auth service closed, by why "
            "(notified: a revocation, deactivation or deletion was announced; sweep: found "
            "by the periodic check).", ("why",))
        self.unauthenticated_messages = self._counter(
            "nats_unauthenticated_messages_total", "Messages (envelopes, session notices) "
            "published by connections the open broker let in without credentials "
            "(nats.open_broker; read from nats-server's connection counts).")
        self.loop_lag = self._gauge(
            "event_loop_lag_seconds", "How late the event loop runs a timer right now "
            "(the current blocking time when it is blocked).")
        self.readiness = self._gauge(
            "readiness_check_up", "1 when a readiness check of this process passed on its "
            "last run, else 0, by check.", ("check",))

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """Every Tideway metric (not the ``process_*`` ones), in definition order."""
        return tuple(self._catalogue)

    # -- definitions ------------------------------------------------------------------------
    def _note(self, name: str, kind: str, labels: Sequence[str], help: str) -> None:
        self._catalogue.append(
            MetricInfo(name=PREFIX + name, kind=kind, labels=tuple(labels), help=help)
        )

    def _counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        self._note(name, "counter", labels, help)
        return Counter(PREFIX + name, help, labels, registry=self.registry)

    def _gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        self._note(name, "gauge", labels, help)
        return Gauge(PREFIX + name, help, labels, registry=self.registry)

    def _histogram(
        self, name: str, help: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        self._note(name, "histogram", labels, help)
        return Histogram(PREFIX + name, help, labels, registry=self.registry, buckets=buckets)
