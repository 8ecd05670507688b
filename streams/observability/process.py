"""One process's observability: its metrics, its probes listener and its components' hooks.

Every long-running command (``tideway ingest``, ``intake``, ``worker``, ``api``, and ``up`` /
``demo``, which run all four in one process) opens one :class:`ProcessObservability` before it
starts its components and hands it to each of them as their
:class:`~streams.observability.events.ProcessHooks`. A component that has opened its
connections calls :meth:`ProcessObservability.ready` with the readiness checks of the services
*it* needs; until every component named at construction has done so, ``/readyz`` fails with a
``startup`` entry naming the ones still connecting (a consumer waiting for its database is not
ready, even though it has no check to fail yet).

When one process runs several components (``tideway up``), each check is named
``<component>.<check>`` (``ingest.redis``, ``worker.postgres``): the components hold their
own connections, and each is checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import TracebackType

from streams.adapters.nats import Nats
from streams.adapters.postgres import Pool
from streams.config import ObservabilitySettings
from streams.observability.http_metrics import Middleware, metrics_middleware
from streams.observability.liveness import Heartbeat
from streams.observability.metrics import Metrics
from streams.observability.observers import (
    AuthMetrics,
    IngestMetrics,
    IntakeMetrics,
    JobMetrics,
    RelayMetrics,
    RetentionMetrics,
)
from streams.observability.probes import ProbeServer
from streams.observability.readiness import Check
from streams.observability.samplers import (
    ConsumerSampler,
    JobQueueSampler,
    Sampler,
    sample_loop,
)

STARTUP_CHECK = "startup"


class ProcessObservability:
    """Implements :class:`~streams.observability.events.ProcessHooks` over one registry."""

    def __init__(
        self,
        settings: ObservabilitySettings,
        *,
        components: Sequence[str],
        port: int | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """``components``: the names of the components this process runs; ``port``
        overrides ``settings.metrics_port`` (``--metrics-port``)."""
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        self.batches = IngestMetrics(self.metrics)
        self.jobs = JobMetrics(self.metrics)
        self.intake = IntakeMetrics(self.metrics)
        self.retention = RetentionMetrics(self.metrics)
        self.auth = AuthMetrics(self.metrics)
        self.relay = RelayMetrics(self.metrics)
        self.components = tuple(components)
        self._waiting = set(components)
        self._stopped: set[str] = set()
        self._checks_of: dict[str, tuple[str, ...]] = {}
        self.probes = ProbeServer(
            settings, self.metrics, checks=[Check(name=STARTUP_CHECK, probe=self._started)],
            port=port,
        )
        self._samplers: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    @property
    def address(self) -> str:
        """``http://host:port`` of the probes listener (once started)."""
        return self.probes.address

    async def __aenter__(self) -> ProcessObservability:
        await self.probes.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for task in self._samplers:
            task.cancel()
        await asyncio.gather(*self._samplers, return_exceptions=True)
        await self.probes.stop()

    # -- ProcessHooks ---------------------------------------------------------------------
    def ready(self, component: str, *checks: Check) -> None:
        """Register ``component``'s readiness checks (it has opened its connections)."""
        if len(self.components) > 1:
            checks = tuple(
                Check(name=f"{component}.{c.name}", probe=c.probe) for c in checks
            )
        self.probes.add_checks(*checks)
        self._checks_of[component] = self._checks_of.get(component, ()) + tuple(
            c.name for c in checks)
        self._waiting.discard(component)

    async def stopping(self, component: str) -> None:
        """``component`` is about to close its connections: its checks are withdrawn (once
        no round still running them is in flight) and ``/readyz`` fails naming it."""
        self._stopped.add(component)
        await self.probes.remove_checks(*self._checks_of.pop(component, ()))

    def heartbeat(self, name: str) -> Heartbeat:
        beat = Heartbeat(name)
        self.probes.add_heartbeat(beat)
        return beat

    def sample_consumer(self, nc: Nats, *, stream: str, durable: str) -> None:
        sampler = ConsumerSampler(self.metrics, nc.jetstream(), stream=stream, durable=durable)
        self._sample(sampler, closed=lambda: bool(nc.is_closed))

    def sample_job_queue(self, pool: Pool) -> None:
        self._sample(JobQueueSampler(self.metrics, pool), closed=pool.is_closing)

    def http_middleware(self) -> Middleware:
        return metrics_middleware(self.metrics)

    # -- internals -------------------------------------------------------------------------
    async def _started(self) -> None:
        if self._waiting:
            raise RuntimeError(f"still connecting: {', '.join(sorted(self._waiting))}")
        if self._stopped:
            raise RuntimeError(f"stopped: {', '.join(sorted(self._stopped))}")

    def _sample(self, sampler: Sampler, *, closed: Callable[[], bool]) -> None:
        self._samplers.append(asyncio.create_task(
            sample_loop(sampler, closed, self.settings.sample_interval_s, self._stop),
            name=f"sampler-{type(sampler).__name__}",
        ))
