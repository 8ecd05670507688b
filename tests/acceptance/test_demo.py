"""The README's first command: ``tideway demo`` on a machine where nothing is configured.

Runs the real CLI as a subprocess in an empty directory with no TIDEWAY_* service URLs, so it
must start its own NATS, Postgres and Redis, use chDB, feed a fleet and a session file, account
for every envelope and exit 0. A second demo in the same directory must work too (message ids
of a new simulation never collide with the first one's).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TIDEWAY = [sys.executable, "-m", "streams.cli.main"]


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env["COLUMNS"] = "200"  # keep rich tables on one line per row
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "runtime")
    # Not a service URL: a free port for the demo's HTTP API, so the test does not collide
    # with anything else on the machine that holds the default one.
    env["TIDEWAY_API__PORT"] = str(_free_port())
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _demo(cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [*TIDEWAY, "demo", "--duration", "3", "--devices", "5", "--rate", "200", "--laps", "2"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


def _row(out: str, label: str) -> str:
    match = re.search(rf"{re.escape(label)}\s*│\s*([^│]+?)\s*│", out)
    assert match, f"no row {label!r} in:\n{out[-3000:]}"
    return match.group(1)


def test_demo_runs_on_embedded_services_and_accounts_for_everything(tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    out = _demo(tmp_path, env)
    assert re.search(r"^console: http://127\.0\.0\.1:\d+/ ", out, re.M), out[:3000]
    stored = int(_row(out, "envelopes stored by JetStream").replace(",", ""))
    recorded = int(_row(out, "envelopes with a recorded status").replace(",", ""))
    assert stored > 0
    assert recorded == stored
    assert _row(out, "session run") in {"succeeded", "partial"}
    found, true = _row(out, "laps found / true laps").split(" / ")
    assert found == true == "2"
    # Embedded services left their data under ./.tideway and were stopped.
    assert (tmp_path / ".tideway" / "postgres" / "pgdata" / "PG_VERSION").exists()
    assert not (tmp_path / ".tideway" / "services.json").exists()

    again = _demo(tmp_path, env)
    assert int(_row(again, "envelopes with a recorded status").replace(",", "")) == int(
        _row(again, "envelopes stored by JetStream").replace(",", "")
    )
    # With repeated message ids the second fleet would be recorded as duplicates, not completed.
    completed = int(_row(again, "completed").split(" ")[0].replace(",", ""))
    assert completed > 0.8 * int(_row(again, "envelopes stored by JetStream").replace(",", ""))
