"""A real Prometheus server for a test: the Debian package's binary on a free port."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
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
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
