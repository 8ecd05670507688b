"""How busy the whole machine was over a measured window, from ``/proc/stat``, and which of
the parts sharing it spent the CPU.

A benchmark that shares the machine with the services it drives (NATS, Postgres, Redis, chDB)
is bounded either by CPU or by waiting; :func:`sample` and :func:`busy_percent` tell which
(Linux only: elsewhere the samples are ``None`` and so is the result).
:func:`by_component` and :func:`ms_per_1000` split the CPU between this process's Python
threads, its chDB threads, Postgres and nats-server (``bench/soak.py``: where a change of
throughput went).
"""

from __future__ import annotations

from pathlib import Path

import psutil

Sample = tuple[int, int] | None
"""(busy, total) jiffies over all cores since boot."""


def sample() -> Sample:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, sum(ticks)


def busy_percent(before: Sample, after: Sample) -> float | None:
    """The share of all cores' time spent busy between two samples (0–100)."""
    if before is None or after is None or after[1] == before[1]:
        return None
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


# Processes counted by name, besides this one.
COMPONENTS = {"nats-server": "nats", "postgres": "postgres"}


def _own_threads() -> dict[tuple[str, int], float]:
    """This process's CPU seconds by thread: chDB's own threads are named by chDB
    (``MergeMutate``, ...), the Python threads (the consumer, its maintenance, the worker
    threads running chDB inserts) keep the process's name."""
    me = psutil.Process()
    own_name = me.name()
    out: dict[tuple[str, int], float] = {}
    for thread in me.threads():
        try:
            name = Path(f"/proc/self/task/{thread.id}/comm").read_text().strip()
        except OSError:  # ended, or no /proc: count it as the consumer's
            name = own_name
        component = "consumer" if name == own_name else "chdb"
        out[(component, thread.id)] = thread.user_time + thread.system_time
    return out


def by_component() -> dict[tuple[str, int], float]:
    """(component, pid or thread id) -> user + system CPU seconds so far: this process's
    Python threads ("consumer") and chDB threads ("chdb"), every Postgres process and
    nats-server."""
    out = _own_threads()
    for proc in psutil.process_iter(["name", "cpu_times"]):
        component = COMPONENTS.get(proc.info["name"] or "")
        if component and proc.info["cpu_times"] is not None:
            out[(component, proc.pid)] = sum(proc.info["cpu_times"][:2])
    return out


def ms_per_1000(
    before: dict[tuple[str, int], float], after: dict[tuple[str, int], float], units: int
) -> dict[str, float]:
    """CPU ms per 1,000 units (envelopes) of each component between two :func:`by_component`
    readings (a process started in between counts from zero; one that ended is missed)."""
    spent: dict[str, float] = {}
    for (component, pid), seconds in after.items():
        spent[component] = spent.get(component, 0.0) + seconds - before.get((component, pid), 0.0)
    return {c: 1000 * s / units * 1000 for c, s in sorted(spent.items())}
