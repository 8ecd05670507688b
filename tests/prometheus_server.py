"""A real Prometheus server for a test: the Debian package's binary on a free port."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from streams.embedded import free_port
from tests.shared_data import skip_or_fail


@contextlib.contextmanager
def running_prometheus(config: dict[str, Any], workdir: Path) -> Iterator[str]:
    """Run ``prometheus`` with ``config`` (its YAML as data) until the block ends; yields its
    base URL. Skips locally, fails under ``CI=true``, when the binary is not installed."""
    binary = shutil.which("prometheus")
    if binary is None:
        skip_or_fail("prometheus is not installed (Debian package `prometheus`; .ci/run "
                     "installs it)")
        return
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (workdir / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=log,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _until_ready(url, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _until_ready(url: str, proc: subprocess.Popen[bytes], within: float = 60.0) -> None:
    """Wait for ``/-/ready``: until its storage is open, Prometheus answers every query with
    an empty 503 (a test querying at once failed on a loaded machine)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"prometheus at {url} did not become ready within {within:g} s")
