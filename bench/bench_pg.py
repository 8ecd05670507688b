"""The Postgres server a benchmark uses, and a fresh database on it for each round.

``TIDEWAY_BENCH_POSTGRES_DSN`` names the server; without it, the local server's Unix socket
when there is one (loopback TCP costs the client a kernel round of its own per message), else
``postgresql://postgres@127.0.0.1:5432/postgres``.
"""

from __future__ import annotations

import os
import uuid

from streams.adapters import postgres

_SOCKET_DIR = "/var/run/postgresql"
_DEFAULT_DSN = (
    f"postgresql://postgres@/postgres?host={_SOCKET_DIR}"
    if os.path.exists(f"{_SOCKET_DIR}/.s.PGSQL.5432")
    else "postgresql://postgres@127.0.0.1:5432/postgres"
)
ADMIN_DSN = os.environ.get("TIDEWAY_BENCH_POSTGRES_DSN", _DEFAULT_DSN)


async def fresh_database(tag: str) -> tuple[str, str]:
    """A new empty database ``tw_bench_<tag>_<random>``: its name and DSN."""
    name = f"tw_bench_{tag}_{uuid.uuid4().hex[:6]}"
    return name, await postgres.create_database(ADMIN_DSN, name)
