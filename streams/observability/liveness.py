"""Is this process alive: is its event loop responsive, and are its main loops still turning?

A :class:`LoopMonitor` task on the process's event loop stamps the time every ``interval_s``.
Anyone (the probes thread in particular) can read how late the next stamp is: while the loop is
blocked — a synchronous call that never returns, a CPU-bound stage run on the loop by mistake —
that lateness grows, and :meth:`Liveness.report` says so *during* the block, not after it.

A :class:`Heartbeat` is ticked by a process's main loop (the consumer's fetch loop, the worker's
poll loop) once per turn. A loop that is wedged on an await that never completes (a lost
connection without a timeout) leaves the event loop responsive but stops ticking; the heartbeat
catches that case.

Both are read from another thread. They store one float each (written by one thread, read by
others: atomic in CPython), so they take no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class LoopMonitor:
    """Measures the event loop's scheduling delay; start it on the loop it watches."""

    def __init__(self, *, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self._stamp = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start stamping on the running loop."""
        self._stamp = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            self._stamp = time.monotonic()
            await asyncio.sleep(self.interval_s)

    def lag_s(self, now: float | None = None) -> float:
        """How late the loop is in running the monitor right now (0 when it is on time)."""
        now = time.monotonic() if now is None else now
        return max(0.0, now - self._stamp - self.interval_s)


class Heartbeat:
    """Ticked once per turn of a main loop; :meth:`age_s` says how long ago."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._last = time.monotonic()

    def tick(self) -> None:
        self._last = time.monotonic()

    def age_s(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self._last


@dataclass(frozen=True, kw_only=True, slots=True)
class LivenessReport:
    ok: bool
    loop_lag_s: float
    heartbeats: Mapping[str, float]
    """Each heartbeat's age in seconds."""
    problems: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Liveness:
    """The rule: alive unless the loop is ``blocked_s`` late or a heartbeat is ``stale_s`` old."""

    monitor: LoopMonitor
    heartbeats: Sequence[Heartbeat] = ()
    blocked_s: float = 10.0
    stale_s: float = 60.0

    def report(self) -> LivenessReport:
        now = time.monotonic()
        lag = self.monitor.lag_s(now)
        ages = {h.name: h.age_s(now) for h in self.heartbeats}
        problems = []
        if lag > self.blocked_s:
            problems.append(f"event loop blocked for {lag:.1f} s (limit {self.blocked_s:g} s)")
        problems += [
            f"{name} has not ticked for {age:.1f} s (limit {self.stale_s:g} s)"
            for name, age in ages.items()
            if age > self.stale_s
        ]
        return LivenessReport(
            ok=not problems, loop_lag_s=lag, heartbeats=ages, problems=tuple(problems)
        )
