"""The Prometheus side of the observer seam: events in, metric updates out.

Each class implements one Protocol of :mod:`streams.observability.events` over a
:class:`~streams.observability.metrics.Metrics`. They hold no state of their own beyond the
metrics, so a process can create one per component and share the registry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from streams.observability.events import NO_ERROR, IngestBatchStats, JobEvent
from streams.observability.metrics import Metrics


class IngestMetrics:
    """A :class:`~streams.observability.events.BatchObserver`: one update per batch."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def on_batch(self, stats: IngestBatchStats) -> None:
        """Add one batch's figures (a handful of counter increments, whatever its size)."""
        m = self.metrics
        m.batches.inc()
        m.batch_duration.observe(stats.duration_s)
        for phase, seconds in stats.phases_s.items():
            m.batch_phases.labels(phase).observe(seconds)
        for (status, code), count in stats.outcomes.items():
            if count:
                m.envelopes.labels(status, code).inc(count)
        if stats.stored_at_ns:
            # One array operation for the batch's latencies (8,000 envelopes by default), not
            # a Python loop: measured, the whole on_batch of such a batch takes 0.6 ms this
            # way against 2.9 ms with a list comprehension of the latencies.
            stored = np.fromiter(stats.stored_at_ns, dtype=np.int64, count=len(stats.stored_at_ns))
            m.end_to_end.observe_many((stats.acked_ns - stored) / 1e9)
        if stats.redelivered:
            m.redelivered.inc(stats.redelivered)
        for reason, count in stats.naks.items():
            m.naks.labels(reason).inc(count)
        for reason, count in stats.dead_letters.items():
            m.dead_letters.labels(reason).inc(count)
        for sink, count in stats.publish_attempts.items():
            m.publish_attempts.labels(sink).inc(count)
        for sink, count in stats.publish_failures.items():
            m.publish_failures.labels(sink).inc(count)
        if stats.dedupe_hits:
            m.dedupe_hits.inc(stats.dedupe_hits)
        if stats.registry_hits:
            m.registry_hits.inc(stats.registry_hits)
        if stats.registry_misses:
            m.registry_misses.inc(stats.registry_misses)


class JobMetrics:
    """A :class:`~streams.observability.events.JobObserver` for one worker process."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def on_claim(self, job: JobEvent) -> None:
        self.metrics.job_claims.labels(job.job_type).inc()
        self.metrics.running_jobs.labels(job.job_type).inc()

    def on_complete(self, job: JobEvent, *, duration_s: float) -> None:
        self._finished(job, "succeeded", duration_s, NO_ERROR)

    def on_fail(self, job: JobEvent, *, duration_s: float, error_code: str) -> None:
        self._finished(job, "failed", duration_s, error_code)

    def on_retry_scheduled(
        self, job: JobEvent, *, duration_s: float, error_code: str, delay_s: float
    ) -> None:
        self._finished(job, "retry_scheduled", duration_s, error_code)
        self.metrics.job_retries.labels(job.job_type).inc()

    def on_cancelled(self, job: JobEvent, *, duration_s: float) -> None:
        self._finished(job, "cancelled", duration_s, NO_ERROR)

    def on_reap(self, *, job_type: str, count: int) -> None:
        self.metrics.stale_locks.labels(job_type).inc(count)

    def on_heartbeat(self, *, worker_id: str, running: int) -> None:
        self.metrics.heartbeats.inc()

    def on_heartbeat_lost(self, job: JobEvent) -> None:
        self.metrics.heartbeats_lost.labels(job.job_type).inc()

    def on_run_finished(self, *, status: str, upload_to_publish_s: float | None) -> None:
        self.metrics.runs_finished.labels(status).inc()
        if upload_to_publish_s is not None:
            self.metrics.upload_to_publish.observe(upload_to_publish_s)

    def _finished(self, job: JobEvent, outcome: str, duration_s: float, code: str) -> None:
        m = self.metrics
        m.running_jobs.labels(job.job_type).dec()
        m.job_duration.labels(job.job_type, outcome).observe(duration_s)
        m.job_attempts.labels(job.job_type, outcome, code).inc()


class RetentionMetrics:
    """A :class:`~streams.observability.events.RetentionObserver`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def on_archive(self, *, tier: str, outcome: str, rows: int) -> None:
        self.metrics.retention_archives.labels(tier, outcome).inc()
        if outcome == "archived":
            self.metrics.retention_archived_rows.labels(tier).inc(rows)


class IntakeMetrics:
    """An :class:`~streams.observability.events.IntakeObserver`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def on_notice(self, *, outcome: str) -> None:
        self.metrics.intake_notices.labels(outcome).inc()

    def on_dead_letter(self, *, code: str) -> None:
        self.metrics.session_dead_letters.labels(code).inc()


class AuthMetrics:
    """An :class:`~streams.observability.events.AuthObserver`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def on_request(self, *, result: str, reason: str, seconds: float) -> None:
        self.metrics.auth_requests.labels(result, reason).inc()
        self.metrics.auth_duration.observe(seconds)

    def on_disconnect(self, *, why: str, connections: int) -> None:
        self.metrics.auth_disconnects.labels(why).inc(connections)

    def on_unauthenticated(self, *, messages: int) -> None:
        self.metrics.unauthenticated_messages.inc(messages)


class RelayMetrics:
    """A :class:`~streams.observability.events.RelayObserver`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def on_relayed(self, *, delays_s: Sequence[float]) -> None:
        self.metrics.events_relayed.inc(len(delays_s))
        for delay in delays_s:
            self.metrics.event_relay_delay.observe(max(delay, 0.0))

    def on_backlog(self, *, age_s: float) -> None:
        self.metrics.event_relay_lag.set(age_s)
