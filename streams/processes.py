"""Tideway's long-running processes, each wired once: ``auth``, ``ingest``, ``intake``,
``worker`` and ``api``.

Each function here is everything one process does between start and stop, given the settings,
the ``stop`` event that asks it to drain and return, and the process's observability hooks.
``tideway up`` runs them side by side in one event loop (:func:`streams.system.components`);
``tideway ingest``, ``tideway worker``... run one each (:mod:`streams.cli.process_commands`),
which is how a Kubernetes pod runs them. Both call the same function, so a process behaves
the same whichever way it was started. Retention needs no process of its own: the consumers'
maintenance leader runs it (:mod:`streams.retention.maintain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Literal

from streams.config import Settings
from streams.observability.events import ProcessHooks

if TYPE_CHECKING:
    from streams.observability.events import IngestBatchStats

Executors = Literal["sessions", "placeholder"]
"""What a worker runs: the real session stages, or pass-through jobs that exercise the engine
on its own."""

INGEST_RATE_EVERY_S = 5.0
"""How often the ingest process logs its rate and what it recorded so far."""


async def auth(settings: Settings, stop: asyncio.Event, hooks: ProcessHooks | None) -> None:
    """Answer nats-server's authorization requests until ``stop`` (docs/security.md)."""
    from streams.identity.callout import run_auth

    await run_auth(settings, stop=stop, hooks=hooks)


async def ingest(
    settings: Settings, stop: asyncio.Event, hooks: ProcessHooks | None, *,
    concurrency: int | None = None,
) -> None:
    """Consume telemetry envelopes until ``stop``, then drain the batches in flight; log the
    rate and the statuses recorded every :data:`INGEST_RATE_EVERY_S` seconds.
    ``concurrency``: batches in flight (default: the settings)."""
    from streams.ingest.consumer import run_consumer

    log = logging.getLogger("tideway.ingest")
    totals: Counter[str] = Counter()
    window = {"start": time.monotonic(), "count": 0}

    def on_batch(stats: IngestBatchStats) -> None:
        totals.update(stats.statuses)
        window["count"] += stats.size
        elapsed = time.monotonic() - window["start"]
        if elapsed >= INGEST_RATE_EVERY_S:
            rate = window["count"] / elapsed
            summary = ", ".join(f"{k} {v}" for k, v in sorted(totals.items()))
            log.info("%.0f envelopes/s; recorded: %s", rate, summary)
            window.update(start=time.monotonic(), count=0)

    log.info("consuming (Ctrl-C or SIGTERM drains and stops)")
    await run_consumer(settings, stop=stop, concurrency=concurrency, on_batch=on_batch,
                       hooks=hooks)
    log.info("drained; recorded: %s", dict(totals))


async def intake(settings: Settings, stop: asyncio.Event, hooks: ProcessHooks | None) -> None:
    """Provision the SESSIONS stream (idempotent), then turn session notices into runs and
    jobs until ``stop``."""
    from streams.sessions.intake import provision_sessions, run_intake

    await provision_sessions(settings)
    await run_intake(settings, stop=stop, hooks=hooks)


async def worker(
    settings: Settings, stop: asyncio.Event, hooks: ProcessHooks | None, *,
    pool: str | None = None, concurrency: int | None = None, executors: Executors = "sessions",
) -> None:
    """Run batch jobs until ``stop``, then finish the running ones. ``pool``: only jobs of
    this pool (``None``: every pool); ``concurrency``: jobs at a time (default:
    ``worker.concurrency``)."""
    from stages.jobs.dag import DEFAULT_DAG  # the standard DAG: this is the top-level wiring
    from streams.jobs.worker import run_worker

    jobs_at_once = concurrency or settings.worker.concurrency
    if executors == "placeholder":
        from streams.jobs.executor import placeholder_executors

        await run_worker(settings, dag=DEFAULT_DAG, executors=placeholder_executors(DEFAULT_DAG),
                         pool=pool, concurrency=jobs_at_once, stop=stop, hooks=hooks)
        return
    from streams.sessions.clickhouse_jobs import hold_embedded_clickhouse
    from streams.sessions.schedules import run_schedules
    from streams.sessions.stage_executors import default_executors

    # Before anything starts: a second worker on one embedded ClickHouse refuses here
    # rather than bounce every ClickHouse job (streams.sessions.clickhouse_jobs).
    await hold_embedded_clickhouse(settings, pool=pool)
    found = default_executors(settings, DEFAULT_DAG)
    # Scheduled backfills: every worker looks, one runs each tick (streams.sessions.schedules).
    schedules = asyncio.create_task(run_schedules(settings, stop), name="backfill-schedules")
    try:
        await found.warm_up()  # start compute processes before the first job arrives
        await run_worker(settings, dag=DEFAULT_DAG, executors=found, pool=pool,
                         concurrency=jobs_at_once, stop=stop, hooks=hooks)
    finally:
        schedules.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await schedules
        await found.aclose()


async def api(settings: Settings, stop: asyncio.Event, hooks: ProcessHooks | None) -> None:
    """Serve the HTTP API (``api.host``, ``api.port``) until ``stop``."""
    from streams.api.server import run_api

    await run_api(settings, stop=stop, hooks=hooks)
