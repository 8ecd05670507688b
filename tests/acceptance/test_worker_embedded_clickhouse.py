"""Two ``tideway worker`` processes on one embedded ClickHouse (issue 27 defect 9).

chDB lets one process open a data directory. Two unpooled workers on the same ``chdb://``
path used to start happily, and every ClickHouse job the second one claimed bounced with
``CLICKHOUSE_BUSY`` for minutes. Now the first worker opens the engine as it starts; a second
one that would run ClickHouse jobs refuses to start, naming the holder and the setups that
work, while a worker of the cpu pool (no ClickHouse job) starts beside them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.clickhouse import embedded_holder

pytestmark = pytest.mark.slow

TIDEWAY = [sys.executable, "-m", "streams.cli.main"]


def _env(pg_dsn: str, tmp_path: Path, chdb: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update({
        "TIDEWAY_CONFIG": str(tmp_path / "absent.toml"),
        "TIDEWAY_POSTGRES_DSN": pg_dsn,
        "TIDEWAY_CLICKHOUSE_DSN": chdb,
        "TIDEWAY_DATA_DIR": str(tmp_path / "data"),
        "TIDEWAY_WORKER__CONCURRENCY": "1",
        "TIDEWAY_LOG_LEVEL": "INFO",
    })  # fmt: skip
    return env


def _worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*TIDEWAY, "worker", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _until(check: object, *, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM ``proc``, wait for it; returns its standard error."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
    return err


def test_a_second_worker_on_one_embedded_clickhouse_refuses_to_start(
    pg_dsn: str, tmp_path: Path
) -> None:
    chdb = f"chdb://{tmp_path / 'chdb'}"
    env = _env(pg_dsn, tmp_path, chdb)
    first = _worker(env)
    others: list[subprocess.Popen[str]] = []
    try:
        # The first worker holds the engine from its start, before it has run any job.
        _until(lambda: embedded_holder(chdb) == first.pid or first.poll() is not None,
               within_s=120, what="the first worker opens the embedded ClickHouse")  # fmt: skip
        assert first.poll() is None, _stop(first)

        second = _worker(env)
        others.append(second)
        try:
            _out, err = second.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError("a second worker on the same chDB path kept running") from None
        assert second.returncode == 1, err
        said = " ".join(err.split())  # the console wraps the one message at its width
        assert "CLICKHOUSE_BUSY" in said, said
        assert f"held by process {first.pid}" in said, said
        assert "--pool io" in said and "TIDEWAY_CLICKHOUSE_DSN" in said, said
        assert "Traceback" not in err

        # A cpu worker claims no ClickHouse job: it starts next to the holder.
        cpu = _worker(env, "--pool", "cpu")
        others.append(cpu)
        time.sleep(8)  # past its start (pool processes warmed up, Postgres listened to)
        assert cpu.poll() is None, _stop(cpu)
        assert embedded_holder(chdb) == first.pid
    finally:
        errs = [_stop(p) for p in others]
        err = _stop(first)
    assert first.returncode == 0, err
    assert others[-1].returncode == 0, errs[-1]
