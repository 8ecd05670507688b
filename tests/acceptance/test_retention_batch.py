"""`tideway retention show | run [--dry-run]` as an operator runs them: the batch half's
leftovers are listed, a dry run leaves them, a run removes only the dead one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _tideway(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_retention_lists_and_sweeps_tmp_leftovers(pg_dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update(
        {
            "TIDEWAY_CONFIG": str(tmp_path / "absent.toml"),
            "TIDEWAY_POSTGRES_DSN": pg_dsn,
            "TIDEWAY_CLICKHOUSE_DSN": f"chdb://{tmp_path / 'chdb'}",
            "TIDEWAY_DATA_DIR": str(tmp_path / "data"),
            "TIDEWAY_LOG_LEVEL": "WARNING",
        }
    )
    tmp = tmp_path / "data" / "objects" / "tmp"
    tmp.mkdir(parents=True)
    (tmp / "dead").write_bytes(b"x" * 100)
    three_days_ago = time.time() - 3 * 86400
    os.utime(tmp / "dead", (three_days_ago, three_days_ago))
    (tmp / "fresh").write_bytes(b"y")

    shown = {r["target"]: r for r in _tideway(env, "retention", "show", "--json")}
    assert shown["tmp/dead"]["tier"] == "tmp_leftovers"
    assert (shown["tmp/dead"]["action"], shown["tmp/dead"]["bytes"]) == ("drop", 100)
    assert shown["tmp/fresh"]["action"] == "keep"

    dry = _tideway(env, "retention", "run", "--dry-run", "--json")
    assert [r["target"] for r in dry["done"] if r["tier"] == "tmp_leftovers"] == ["tmp/dead"]
    assert sorted(p.name for p in tmp.iterdir()) == ["dead", "fresh"]

    ran = _tideway(env, "retention", "run", "--json")
    assert [r["target"] for r in ran["done"] if r["tier"] == "tmp_leftovers"] == ["tmp/dead"]
    assert sorted(p.name for p in tmp.iterdir()) == ["fresh"]
