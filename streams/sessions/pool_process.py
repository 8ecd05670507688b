"""A compute-pool process dies with the worker that started it.

Theory of operation
-------------------
A stage body runs whole in a process of the worker's pool (``streams.sessions.
stage_executors``). The worker stops that process when the job is cancelled, times out or is
drained; but a worker that is itself killed (``kill -9``, the OOM killer, a node going away)
stops nothing, and its pool process used to compute on for the rest of the stage - 6 to 13 s
of fusion in the fault run of issue 27, side by side with the retry another worker started
once the job was reaped. So every pool process, before its first job, ties its life to its
parent's:

- **Linux**: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the process the moment
  its parent dies, whatever it is doing (a long C call holding the GIL included). Measured:
  gone 5-8 ms after its parent's SIGKILL (``tests/unit/streams/sessions/test_pool_process.py``),
  and a fusing pool process of a real ``tideway worker`` 50-75 ms after ``kill -9`` where it
  used to fuse on for ~10 s (the test polls every 50 ms). The call is made through ``ctypes``:
  it is one line, and the packages that wrap it are a C extension last released in 2020 that
  needs libcap's headers to build (``python-prctl``) or a ctypes wrapper no better kept than
  this one (``pyprctl``). The signal follows the *thread* that started the process: pebble
  starts a pool's first processes from the thread that first schedules a task (the worker's
  event loop, which lives as long as the worker) and their replacements from its pool-manager
  thread, which lives as long as the pool.
- **Elsewhere** (macOS has no such call) a daemon thread checks every
  :data:`WATCH_INTERVAL_S` whether the process still has the parent it was started by, and
  ends it once it has not (about 0.2 s measured; the GIL permitting: a stage in a long C call
  is reached when the call returns).

Either way the process first checks that its parent is still the worker that started it: a
worker that died while the process was starting never sends the signal.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Final

__all__ = ["WATCH_INTERVAL_S", "die_with_parent"]

PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
WATCH_INTERVAL_S: Final = 0.2
"""How often the fallback watchdog looks for its parent (where the kernel cannot be asked)."""


def die_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid`` (the worker that started it) dies."""
    if not _kill_on_parent_death():
        threading.Thread(
            target=_watch, args=(parent_pid,), name="parent-watch", daemon=True
        ).start()
    if os.getppid() != parent_pid:  # the worker died before the signal was asked for
        _die()


def _kill_on_parent_death() -> bool:
    """Ask the kernel for SIGKILL when the parent dies; ``False`` where it cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        # prctl is variadic and reads its arguments as unsigned longs: pass them as such.
        done = libc.prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
                          ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))  # fmt: skip
    except (OSError, AttributeError):  # no libc symbols to load (a static or exotic build)
        return False
    return bool(done == 0)


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_INTERVAL_S)
    _die()


def _die() -> None:
    # As the kernel would: no clean-up, no atexit handlers, no flushing of a half-done write
    # (outputs are promoted atomically, so nothing half-written is ever read).
    os.kill(os.getpid(), signal.SIGKILL)
