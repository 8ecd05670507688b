"""A compute-pool process dies with its worker (issue 27 defect 7), by either mechanism.

A stand-in worker process starts a stand-in pool process that calls ``die_with_parent`` as the
pool's initializer does; the worker is then killed with SIGKILL, as by ``kill -9`` or the OOM
killer, and the pool process must be gone at once (the kernel's parent-death signal) or within
a few watch intervals (the watchdog used where the kernel cannot be asked).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from streams.sessions.pool_process import WATCH_INTERVAL_S
from tests.conftest import REPO_ROOT

_POOL_PROCESS = """
import os, sys, time
from streams.sessions import pool_process
if sys.argv[1] == "watchdog":  # as on a platform without prctl
    pool_process._kill_on_parent_death = lambda: False
pool_process.die_with_parent(os.getppid())
print("ready", flush=True)
time.sleep(120)
"""

_WORKER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _orphan_lifetime(mode: str) -> float:
    """Seconds the pool process outlives its killed worker (at most 10)."""
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, _POOL_PROCESS, mode],
                              stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)  # fmt: skip
    try:
        assert worker.stdout is not None
        pool = int(worker.stdout.readline())
        assert worker.stdout.readline().strip() == "ready"
        os.kill(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait()
        while not _gone(pool) and time.monotonic() - killed < 10:
            time.sleep(0.005)
        lifetime = time.monotonic() - killed
        if not _gone(pool):
            os.kill(pool, signal.SIGKILL)
        return lifetime
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_kernel_kills_the_pool_process_with_its_worker() -> None:
    assert _orphan_lifetime("prctl") < 2.0


def test_the_watchdog_ends_the_pool_process_where_the_kernel_cannot_be_asked() -> None:
    assert _orphan_lifetime("watchdog") < 2.0 + WATCH_INTERVAL_S


def test_a_process_whose_worker_is_already_gone_ends_at_once() -> None:
    code = "from streams.sessions.pool_process import die_with_parent; die_with_parent(-1)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, timeout=60)
    assert done.returncode == -signal.SIGKILL
