"""A real PgBouncer (the Debian package) in transaction mode in front of the test's database.

Each test that asks for ``pgbouncer`` gets its own: an ini on a free port, ``auth_type =
trust`` with an ``auth_file`` naming the DSN's user, ``pool_mode = transaction``, every
database forwarded to the local Postgres of the test's DSN. PgBouncer refuses to run as root,
so as root it is started with ``-u postgres`` (the Debian server package's user).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from streams.config import Settings
from tests.integration.ingest.conftest import fleet, harness  # noqa: F401 (fixtures)
from tests.integration.jobs.conftest import conn, owner  # noqa: F401 (fixtures)

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

# Tideway's streaming pools set these per session in the startup packet; PgBouncer refuses
# startup parameters it does not know unless told to ignore them (docs/deploy.md).
IGNORED = "jit,max_parallel_workers_per_gather,plan_cache_mode"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PgBouncer:
    port: int
    log: Path

    def dsn(self, direct: str) -> str:
        """``direct`` (a DSN of the local Postgres) through this PgBouncer."""
        parts = urlsplit(direct)
        return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{self.port}"))


def _start(tmp: Path, upstream: str) -> tuple[subprocess.Popen[bytes], PgBouncer]:
    if not Path(PGBOUNCER).exists():
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    parts = urlsplit(upstream)
    port = free_port()
    log = tmp / "pgbouncer.log"
    (tmp / "users.txt").write_text(f'"{parts.username}" ""\n')
    (tmp / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 20\nmax_client_conn = 200\n"
        f"ignore_startup_parameters = {IGNORED}\nlogfile = {log}\n"
    )
    command = [PGBOUNCER, str(tmp / "pgbouncer.ini")]
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for path in (tmp, *tmp.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return process, PgBouncer(port=port, log=log)


async def _wait_listening(process: subprocess.Popen[bytes], bouncer: PgBouncer) -> None:
    port = bouncer.port
    for _ in range(100):
        if process.poll() is not None:
            found = bouncer.log.read_text() if bouncer.log.exists() else ""
            raise RuntimeError(f"pgbouncer exited {process.returncode}: {found}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError("pgbouncer did not start listening")


@pytest.fixture
async def pgbouncer(pg_dsn: str) -> AsyncIterator[PgBouncer]:
    # Not under pytest's tmp_path: as root, PgBouncer runs as ``postgres``, which cannot enter
    # pytest's private directory.
    tmp = Path(tempfile.mkdtemp(prefix="tw-pgbouncer-"))
    try:
        process, bouncer = _start(tmp, pg_dsn)
        try:
            await _wait_listening(process, bouncer)
            yield bouncer
        finally:
            process.terminate()
            process.wait(10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def through(settings: Settings, bouncer: PgBouncer, *, cache: int = 0) -> Settings:
    """``settings`` with Postgres reached through ``bouncer`` and a statement cache of
    ``cache`` (0: what PgBouncer < 1.21 in transaction mode needs)."""
    return settings.model_copy(
        update={"postgres_statement_cache_size": cache}
    ).with_services(postgres_dsn=bouncer.dsn(settings.postgres()))

