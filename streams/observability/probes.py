"""The probes listener every long-running process starts: ``/metrics``, ``/livez``, ``/readyz``.

Why a thread of its own
-----------------------
``/livez`` exists to tell an orchestrator that the event loop is stuck. An HTTP listener on
that same loop cannot answer while it is stuck: the probe would time out rather than say why,
and a loop blocked for good would never report anything. So the listener runs an aiohttp
server on a private event loop in a daemon thread. ``/livez`` reads the
:class:`~streams.observability.liveness.LoopMonitor`'s last stamp from that thread and answers
503 *while* the main loop is blocked; ``/metrics`` keeps serving too (prometheus-client's
collectors are thread-safe). ``/readyz`` checks use the process's own clients, which belong to
the main loop, so they are submitted to it (``run_coroutine_threadsafe``); a main loop that does
not run them in time makes ``/readyz`` fail with an ``event_loop`` entry.

A blocked loop holding the GIL in pure Python still lets the thread run: CPython switches
threads every few milliseconds.

Readiness is also evaluated every ``sample_interval_s`` on the main loop, so the
``tideway_readiness_check_up`` gauge (and the "readiness down" alert) does not depend on
anyone polling ``/readyz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import threading
from collections.abc import Sequence
from types import TracebackType

import orjson
from aiohttp import web
from prometheus_client.exposition import choose_encoder

from streams.config import ObservabilitySettings
from streams.observability.liveness import Heartbeat, Liveness, LoopMonitor
from streams.observability.metrics import Metrics
from streams.observability.readiness import Check, CheckResult, run_checks

log = logging.getLogger(__name__)


class ProbeServer:
    """One process's probes listener; use as ``async with ProbeServer(...) as probes:``."""

    def __init__(
        self,
        settings: ObservabilitySettings,
        metrics: Metrics,
        *,
        checks: Sequence[Check] = (),
        heartbeats: Sequence[Heartbeat] = (),
        port: int | None = None,
    ) -> None:
        """``checks`` are this process's readiness checks; ``heartbeats`` its main loops;
        ``port`` overrides ``settings.metrics_port`` (a command's ``--metrics-port``)."""
        self.settings = settings
        self.metrics = metrics
        self.checks = tuple(checks)
        self.host = settings.host
        self.port = settings.metrics_port if port is None else port
        self.monitor = LoopMonitor(interval_s=min(0.25, settings.loop_blocked_s / 4))
        self.liveness = Liveness(
            monitor=self.monitor, heartbeats=tuple(heartbeats),
            blocked_s=settings.loop_blocked_s, stale_s=settings.heartbeat_stale_s,
        )
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._stop = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        self._rounds: set[asyncio.Future[None]] = set()
        """One future per round of checks running on the main loop (the refresher's,
        ``/readyz``'s), done when the round ends."""

    def add_checks(self, *checks: Check) -> None:
        """Add readiness checks (a component that has just opened its connections)."""
        self.checks = (*self.checks, *checks)

    async def remove_checks(self, *names: str) -> None:
        """Withdraw the checks named ``names`` (a component about to close its connections),
        returning once no round of checks that may still run them is in flight: a check must
        not use a client after its owner closed it (redis-py, for one, quietly reconnects a
        closed client, and that connection is then never closed)."""
        self.checks = tuple(c for c in self.checks if c.name not in names)
        if self._rounds:
            await asyncio.wait(list(self._rounds))  # being cancelled must not cancel them

    def add_heartbeat(self, heartbeat: Heartbeat) -> None:
        """Watch one more main loop for ``/livez``."""
        self.liveness = dataclasses.replace(
            self.liveness, heartbeats=(*self.liveness.heartbeats, heartbeat)
        )

    @property
    def address(self) -> str:
        """``http://host:port`` once started (what ``services.json`` records)."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Start the loop monitor, the readiness refresher and the listener thread."""
        self._main = asyncio.get_running_loop()
        self.monitor.start()
        self.metrics.loop_lag.set_function(self.monitor.lag_s)
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, failure), name="tideway-probes", daemon=True
        )
        self._thread.start()
        await asyncio.to_thread(ready.wait)
        if failure:
            await self.monitor.stop()
            raise failure[0]
        self._refresher = asyncio.create_task(self._refresh(), name="readiness-refresher")
        log.info("probes listening on %s", self.address)

    async def stop(self) -> None:
        """Stop the listener thread and the tasks (idempotent)."""
        self._stop.set()
        if self._refresher is not None:
            await self._refresher
            self._refresher = None
        loop, runner, thread = self._loop, self._runner, self._thread
        if loop is not None and runner is not None and thread is not None:
            done = asyncio.run_coroutine_threadsafe(runner.cleanup(), loop)
            await asyncio.wrap_future(done)
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
        self._loop = self._runner = self._thread = None
        await self.monitor.stop()

    async def __aenter__(self) -> ProbeServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- the listener thread ------------------------------------------------------------------
    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._listen(loop))
        except BaseException as exc:  # reported to start(), which raises it on the main loop
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None)  # scrapes every few seconds: no log
        await runner.setup()
        # Bind the socket ourselves so that port 0 ("any free port") can be read back.
        sock = socket.create_server((self.host, self.port), reuse_port=False)
        try:
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self.port = int(sock.getsockname()[1])
        self._loop, self._runner = loop, runner

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _livez(self, request: web.Request) -> web.Response:
        report = self.liveness.report()
        body = {
            "status": "ok" if report.ok else "failed",
            "loop_lag_s": round(report.loop_lag_s, 3),
            "heartbeats": {k: round(v, 3) for k, v in report.heartbeats.items()},
            "problems": list(report.problems),
        }
        return _json(body, 200 if report.ok else 503)

    async def _readyz(self, request: web.Request) -> web.Response:
        results = await self._check_from_thread()
        failed = [r for r in results if not r.ok]
        body = {
            "status": "ready" if not failed else "not ready",
            "checks": [{"name": r.name, "ok": r.ok, "reason": r.reason} for r in results],
            "failed": {r.name: r.reason for r in failed},
        }
        return _json(body, 200 if not failed else 503)

    async def _check_from_thread(self) -> tuple[CheckResult, ...]:
        assert self._main is not None
        limit = self.settings.check_timeout_s
        try:
            future = asyncio.run_coroutine_threadsafe(self.check(), self._main)
        except RuntimeError as exc:  # the main loop is closed: the process is stopping
            return (CheckResult(name="event_loop", ok=False, reason=str(exc)),)
        try:
            # The checks time out after `limit` on the main loop; the extra second is for
            # the main loop to get round to them at all.
            return await asyncio.wait_for(asyncio.wrap_future(future), limit + 1.0)
        except TimeoutError:
            future.cancel()
            reason = f"event loop did not run the checks within {limit + 1.0:g} s"
            return (CheckResult(name="event_loop", ok=False, reason=reason),)

    # -- on the main loop ------------------------------------------------------------------
    async def check(self) -> tuple[CheckResult, ...]:
        """Run the readiness checks now and record them in ``tideway_readiness_check_up``."""
        ended = asyncio.get_running_loop().create_future()
        self._rounds.add(ended)
        try:
            results = await run_checks(self.checks, timeout_s=self.settings.check_timeout_s)
        finally:
            self._rounds.discard(ended)
            ended.set_result(None)
        for result in results:
            self.metrics.readiness.labels(result.name).set(1 if result.ok else 0)
        return results

    async def _refresh(self) -> None:
        while not self._stop.is_set():
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.sample_interval_s)


def _json(body: object, status: int) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
