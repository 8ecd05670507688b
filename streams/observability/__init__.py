"""Observability: metrics, health probes and structured logs for every long-running process.

Theory of operation
-------------------
The engine and the pipeline know nothing about Prometheus. They report what happened through
the observer interfaces in :mod:`streams.observability.events` (plain Protocols and frozen value
objects): the ingest pipeline hands one :class:`~streams.observability.events.IngestBatchStats`
per batch to a :class:`~streams.observability.events.BatchObserver`, the job engine calls a
:class:`~streams.observability.events.JobObserver` at each step of a job's life. The classes in
:mod:`streams.observability.observers` implement those interfaces by updating the metrics defined
once in :mod:`streams.observability.metrics`. Counters on the hot path move once per batch.

Gauges that describe shared state (job queue depth, JetStream consumer pending) are *sampled*
by :mod:`streams.observability.samplers` at a slow interval with one cheap query each, never
computed per event.

A process exposes all of it through :class:`streams.observability.probes.ProbeServer`
(``/metrics``, ``/livez``, ``/readyz``) and logs through
:func:`streams.observability.logs.configure_logging`.

Importing this package imports nothing heavy; import the module you need.
"""
