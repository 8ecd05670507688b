"""The metric catalogue and the observers that feed it (no services: the registry is in memory)."""

from __future__ import annotations

import re
import uuid

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.observability.bulk_histogram import BulkHistogram
from streams.observability.events import (
    NO_ERROR,
    BatchObserver,
    IngestBatchStats,
    IntakeObserver,
    JobEvent,
    JobObserver,
)
from streams.observability.metrics import Metrics
from streams.observability.observers import IngestMetrics, IntakeMetrics, JobMetrics

#: Labels that name one thing among unboundedly many: never a metric label.
UNBOUNDED = {"device", "device_id", "message_id", "msg_id", "job_id", "run_id", "session_id",
             "tenant", "request_id", "trace_id", "path"}
ACKED_NS = 1_764_000_000_000_000_000  # a batch's acks, epoch ns


def _samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    return _samples(metrics)[(name, frozenset(labels.items()))]


def test_catalogue_follows_prometheus_naming_and_bounded_labels() -> None:
    catalogue = Metrics(process=False).catalogue()
    names = [m.name for m in catalogue]
    assert len(names) == len(set(names))
    for metric in catalogue:
        assert re.fullmatch(r"tideway_[a-z][a-z0-9_]*", metric.name), metric.name
        assert metric.kind in {"counter", "gauge", "histogram"}
        assert (metric.kind == "counter") == metric.name.endswith("_total"), metric.name
        if metric.kind == "histogram":
            assert metric.name.endswith("_seconds"), f"{metric.name}: histograms are times"
        assert not set(metric.labels) & UNBOUNDED, f"{metric.name}: unbounded label"
        assert metric.help.endswith("."), metric.name


def test_every_catalogue_entry_is_exposed_under_its_name() -> None:
    metrics = Metrics(process=False)
    exposed = {f.name for f in text_string_to_metric_families(
        generate_latest(metrics.registry).decode())}
    # The parser names counters without "_total"; labelled metrics show a family with no sample.
    for metric in metrics.catalogue():
        assert metric.name.removesuffix("_total") in exposed, metric.name


def test_two_registries_are_independent() -> None:
    first, second = Metrics(), Metrics()  # would raise "Duplicated timeseries" on one registry
    first.batches.inc()
    assert _value(first, "tideway_ingest_batches_total") == 1
    assert _value(second, "tideway_ingest_batches_total") == 0


def test_batch_observer_adds_a_whole_batch_at_once() -> None:
    metrics = Metrics(process=False)
    observer: BatchObserver = IngestMetrics(metrics)
    stats = IngestBatchStats(
        size=6, duration_s=0.04,
        outcomes={("completed", NO_ERROR): 4, ("failed_validation", "MISSING_REQUIRED"): 1,
                  ("duplicate", NO_ERROR): 1},
        # Latencies 0.01, 0.02, 0.2, 0.2 and 3.0 s: stored that long before the acks.
        stored_at_ns=tuple(ACKED_NS - int(s * 1e9) for s in (0.01, 0.02, 0.2, 0.2, 3.0)),
        acked_ns=ACKED_NS,
        redelivered=2, naks={"REDIS_UNAVAILABLE": 3}, dead_letters={"PUBLISH_FAILED": 1},
        publish_attempts={"hot_state": 5, "analytics": 4}, publish_failures={"hot_state": 1},
        dedupe_hits=1, registry_hits=5, registry_misses=1,
        phases_s={"prepare": 0.003, "hot_state": 0.002, "analytics": 0.02, "record": 0.008},
    )
    observer.on_batch(stats)
    observer.on_batch(stats)

    v = _samples(metrics)

    def at(name: str, **labels: str) -> float:
        return v[(name, frozenset(labels.items()))]

    assert at("tideway_ingest_batches_total") == 2
    assert at("tideway_ingest_envelopes_total", status="completed", error_code="") == 8
    assert at("tideway_ingest_envelopes_total", status="failed_validation",
              error_code="MISSING_REQUIRED") == 2
    assert at("tideway_ingest_batch_duration_seconds_count") == 2
    for phase, seconds in stats.phases_s.items():  # each phase its own series
        assert at("tideway_ingest_batch_phase_seconds_count", phase=phase) == 2
        assert abs(at("tideway_ingest_batch_phase_seconds_sum", phase=phase)
                   - 2 * seconds) < 1e-12
    assert at("tideway_ingest_batch_phase_seconds_bucket", phase="prepare", le="0.005") == 2
    assert at("tideway_ingest_batch_phase_seconds_bucket", phase="analytics", le="0.01") == 0
    assert at("tideway_ingest_batch_phase_seconds_bucket", phase="analytics", le="0.025") == 2
    assert at("tideway_ingest_end_to_end_latency_seconds_count") == 10
    assert at("tideway_ingest_end_to_end_latency_seconds_bucket", le="0.01") == 2  # le: inclusive
    assert at("tideway_ingest_end_to_end_latency_seconds_bucket", le="0.25") == 8
    assert at("tideway_ingest_end_to_end_latency_seconds_bucket", le="+Inf") == 10
    assert abs(at("tideway_ingest_end_to_end_latency_seconds_sum") - 2 * 3.43) < 1e-9
    assert at("tideway_ingest_redelivered_envelopes_total") == 4
    assert at("tideway_ingest_naks_total", reason="REDIS_UNAVAILABLE") == 6
    assert at("tideway_ingest_dead_letters_total", reason="PUBLISH_FAILED") == 2
    assert at("tideway_ingest_publish_attempts_total", sink="hot_state") == 10
    assert at("tideway_ingest_publish_failures_total", sink="hot_state") == 2
    assert at("tideway_ingest_dedupe_hits_total") == 2
    assert at("tideway_ingest_registry_cache_hits_total") == 10
    assert at("tideway_ingest_registry_cache_misses_total") == 2


def test_bulk_histogram_matches_prometheus_clients_own() -> None:
    values = [0.0, 0.005, 0.01, 0.0100001, 0.3, 1.0, 7.5, 60.0, 61.0, 1e9]
    buckets = (0.01, 0.1, 1.0, 10.0, 60.0)
    registry = CollectorRegistry()
    bulk = BulkHistogram("bulk_seconds", "b.", buckets=buckets, registry=registry)
    reference = Histogram("reference_seconds", "r.", buckets=buckets, registry=registry)
    bulk.observe_many(values[:4])
    bulk.observe_many([])
    bulk.observe_many(values[4:])
    for value in values:
        reference.observe(value)
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(registry).decode())}

    def shape(name: str) -> list[tuple[str, dict[str, str], float]]:
        return [(s.name.removeprefix(name), s.labels, s.value)
                for s in families[name].samples if not s.name.endswith("_created")]

    assert shape("bulk_seconds") == shape("reference_seconds")


def test_job_observer_records_the_lifecycle() -> None:
    metrics = Metrics(process=False)
    observer: JobObserver = JobMetrics(metrics)
    job = JobEvent(job_id=uuid.uuid4(), run_id=uuid.uuid4(), job_type="parse", attempt=1,
                   worker_id="w-1")
    observer.on_claim(job)
    observer.on_claim(job)
    assert _value(metrics, "tideway_worker_running_jobs", job_type="parse") == 2
    observer.on_retry_scheduled(job, duration_s=0.3, error_code="PG_UNAVAILABLE", delay_s=30)
    observer.on_complete(job, duration_s=2.0)
    observer.on_claim(job)
    observer.on_fail(job, duration_s=0.2, error_code="PARSE_ERROR")
    observer.on_reap(job_type="fuse", count=2)
    observer.on_heartbeat(worker_id="w-1", running=1)
    observer.on_heartbeat_lost(job)
    observer.on_run_finished(status="completed", upload_to_publish_s=42.0)
    observer.on_run_finished(status="failed", upload_to_publish_s=None)

    v = _samples(metrics)

    def at(name: str, **labels: str) -> float:
        return v[(name, frozenset(labels.items()))]

    assert at("tideway_worker_running_jobs", job_type="parse") == 0
    assert at("tideway_job_claims_total", job_type="parse") == 3
    assert at("tideway_job_attempts_total", job_type="parse", outcome="succeeded",
              error_code="") == 1
    assert at("tideway_job_attempts_total", job_type="parse", outcome="retry_scheduled",
              error_code="PG_UNAVAILABLE") == 1
    assert at("tideway_job_attempts_total", job_type="parse", outcome="failed",
              error_code="PARSE_ERROR") == 1
    assert at("tideway_job_duration_seconds_count", job_type="parse", outcome="succeeded") == 1
    assert at("tideway_job_duration_seconds_sum", job_type="parse", outcome="succeeded") == 2.0
    assert at("tideway_job_retries_scheduled_total", job_type="parse") == 1
    assert at("tideway_job_stale_locks_reaped_total", job_type="fuse") == 2
    assert at("tideway_worker_heartbeats_total") == 1
    assert at("tideway_worker_heartbeats_lost_total", job_type="parse") == 1
    assert at("tideway_runs_finished_total", status="completed") == 1
    assert at("tideway_runs_finished_total", status="failed") == 1
    assert at("tideway_session_upload_to_publish_seconds_count") == 1
    assert at("tideway_session_upload_to_publish_seconds_sum") == 42.0


def test_intake_observer_counts_notices_by_outcome() -> None:
    metrics = Metrics(process=False)
    observer: IntakeObserver = IntakeMetrics(metrics)
    observer.on_notice(outcome="planned")
    observer.on_notice(outcome="planned")
    observer.on_notice(outcome="duplicate")
    assert _value(metrics, "tideway_intake_notices_total", outcome="planned") == 2
    assert _value(metrics, "tideway_intake_notices_total", outcome="duplicate") == 1


def test_intake_observer_counts_dead_letters_by_code() -> None:
    metrics = Metrics(process=False)
    observer: IntakeObserver = IntakeMetrics(metrics)
    observer.on_dead_letter(code="BAD_NOTICE")
    observer.on_dead_letter(code="BAD_NOTICE")
    observer.on_dead_letter(code="ARTIFACT_MISSING")
    assert _value(metrics, "tideway_session_dead_letters_total", code="BAD_NOTICE") == 2
    assert _value(metrics, "tideway_session_dead_letters_total", code="ARTIFACT_MISSING") == 1


@pytest.mark.parametrize("module", [
    "streams.observability.events",
    # The engine and the pipeline report through the seam only (issue 13 item 6).
    "streams.ingest.pipeline",
    "streams.ingest.consumer",
    "streams.jobs.worker",
    "streams.jobs.queue",
    "streams.sessions.intake",
])
def test_the_observer_seam_does_not_import_the_metrics_library(module: str) -> None:
    import subprocess
    import sys

    code = f"import sys, {module}; sys.exit('prometheus_client' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
