"""The Postgres logins a deployment gives its processes (docs/deploy.md#postgres-roles), tried
on a real, migrated Postgres:

* ``deploy/postgres/logins.sql`` (docker-compose.yml's ``postgres-logins`` runs it; the docs
  give it to every deployment) makes one login per role of migration 0022, each acting as its
  role, so what the maintenance login creates - partitions - belongs to the role; run again it
  changes nothing but the passwords, and with a password missing it stops before any change.
* The Deployments' ``wait-for-schema`` init container, which now connects as its pod's own
  login, sees the migration head as each of them; and while a login cannot connect it keeps
  waiting and says why.

The logins are objects of the whole cluster, not of the test's database: each test drops them
again. The test server trusts local connections, so passwords are set but not checked here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import yaml

from streams.migrate import sync_url
from tests.shared_data import REPO_ROOT, skip_or_fail

LOGINS_SQL = REPO_ROOT / "deploy" / "postgres" / "logins.sql"
BASE = REPO_ROOT / "deploy" / "kubernetes" / "base"
ROLES = ("ingest", "intake", "worker", "api", "auth", "maintenance")


def _psql() -> str:
    """psql 15 or newer (``\\getenv``): the system's, else the pgserver wheel's (the embedded
    extra of [dev])."""
    found = shutil.which("psql")
    if found is None:
        try:
            import pgserver  # type: ignore[import-untyped]
        except ImportError:
            skip_or_fail("psql is not installed (nor the pgserver wheel, which bundles it)")
            raise AssertionError("unreachable") from None
        candidate = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
        if not candidate.exists():
            skip_or_fail(f"psql is not installed and {candidate} does not exist")
        found = str(candidate)
    return found


def _as_login(dsn: str, login: str, password: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{login}:{password}@{host}"))


def _passwords() -> dict[str, str]:
    return {f"TIDEWAY_PG_{role.upper()}_PASSWORD": f"{role}-test" for role in ROLES}


def _run_logins_sql(dsn: str, passwords: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEWAY_PG_", "PG"))}
    env.update(passwords)
    return subprocess.run([_psql(), "-X", "-v", "ON_ERROR_STOP=1", "-f", str(LOGINS_SQL),
                           sync_url(dsn).replace("postgresql+psycopg://", "postgresql://")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def _existing_logins(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)",
                        [[f"tideway_{r}_login" for r in ROLES]]).fetchall()
    return {r[0] for r in rows}


@pytest.fixture
def owner(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection as the owner (the test's superuser), which drops the logins afterwards."""
    with psycopg.connect(sync_url(pg_dsn).replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as conn:
        try:
            yield conn
        finally:
            for login in sorted(_existing_logins(conn)):
                conn.execute(f'DROP ROLE "{login}"')


@pytest.fixture
def logins(pg_dsn: str, owner: psycopg.Connection[Any]) -> dict[str, str]:
    """role -> the DSN of its login, as deploy/postgres/logins.sql made it."""
    done = _run_logins_sql(pg_dsn, _passwords())
    assert done.returncode == 0, done.stdout + done.stderr
    return {role: _as_login(pg_dsn, f"tideway_{role}_login", f"{role}-test") for role in ROLES}


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(sync_url(dsn).replace("postgresql+psycopg://", "postgresql://"),
                           autocommit=True)


def test_logins_sql_makes_one_login_per_role_acting_as_it(
    pg_dsn: str, owner: psycopg.Connection[Any], logins: dict[str, str],
) -> None:
    assert _existing_logins(owner) == {f"tideway_{r}_login" for r in ROLES}
    for role, dsn in logins.items():
        with _connect(dsn) as conn:
            row = conn.execute("SELECT session_user, current_user").fetchone()
            assert row == (f"tideway_{role}_login", f"tideway_{role}"), role
    # A partition the maintenance login adds belongs to the role, not to the login: the
    # migrating login (a member of tideway_maintenance) and any later maintenance login can
    # still alter and drop it.
    with _connect(logins["maintenance"]) as conn:
        conn.execute("CREATE TABLE ingestion_messages_p29990101 PARTITION OF ingestion_messages"
                     " FOR VALUES FROM ('2999-01-01') TO ('2999-01-02')")
        owner_of = conn.execute("SELECT relowner::regrole::text FROM pg_class"
                                " WHERE relname = 'ingestion_messages_p29990101'").fetchone()
        assert owner_of == ("tideway_maintenance",)
        conn.execute("DROP TABLE ingestion_messages_p29990101")
    # Run again (a password rotation): nothing new, nothing fails.
    again = _run_logins_sql(pg_dsn, {k: v + "-2" for k, v in _passwords().items()})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "CREATE ROLE" not in again.stdout


def test_logins_sql_stops_without_every_password(
    pg_dsn: str, owner: psycopg.Connection[Any],
) -> None:
    passwords = _passwords()
    del passwords["TIDEWAY_PG_AUTH_PASSWORD"]
    done = _run_logins_sql(pg_dsn, passwords)
    assert done.returncode != 0
    assert "TIDEWAY_PG_AUTH_PASSWORD" in done.stderr
    assert _existing_logins(owner) == set()  # nothing was made


def _wait_for_schema() -> list[str]:
    (deployment,) = [d for d in yaml.safe_load_all((BASE / "ingest.yaml").read_text())
                     if d and d["kind"] == "Deployment"]
    (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
    command: list[str] = init["command"]
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def _environment(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env["TIDEWAY_POSTGRES_DSN"] = dsn
    return env


@pytest.mark.parametrize("role", ROLES)
def test_wait_for_schema_passes_as_each_process_login(
    logins: dict[str, str], role: str, tmp_path: Path,
) -> None:
    # Every pod's init container reads alembic_version as its own login. At the head it
    # returns at once; a first line is a report that it waits (and why).
    with subprocess.Popen(_wait_for_schema(), env=_environment(logins[role]), cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "", line
            assert proc.wait(30) == 0
        finally:
            proc.kill()


def test_wait_for_schema_says_why_a_login_cannot_read(pg_dsn: str, tmp_path: Path) -> None:
    # The login is not made yet (the Secret came before logins.sql ran): it waits, and says so.
    dsn = _as_login(pg_dsn, "tideway_nobody_login", "x")
    with subprocess.Popen(_wait_for_schema(), env=_environment(dsn), cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "waiting for tideway migrate: database at not readable (OperationalError:" \
                in line, line
            assert "tideway_nobody_login" in line, line
            assert proc.poll() is None  # still waiting
        finally:
            proc.kill()
