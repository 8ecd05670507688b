"""How busy the whole machine was over a measured window, from ``/proc/stat``.

A benchmark that shares the machine with the services it drives (NATS, Postgres, Redis, chDB)
is bounded either by CPU or by waiting; this tells which. Linux only: elsewhere the samples
are ``None`` and so is the result.
"""

from __future__ import annotations

from pathlib import Path

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
