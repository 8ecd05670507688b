"""The README's five-minute tour, run as a new user runs it.

The commands are read from the README itself (its ``## A five-minute tour`` block), in order:
``up`` in "terminal 1" (a subprocess that stays up), every other command in "terminal 2" (a
subprocess each, in the same directory, finding the system through ``.tideway/services.json``).
Every one must exit 0 and print what the README says it prints: the words quoted in its
comment (``# ... "run finished"``), and the facts the text around the block states, checked
below per command. Placeholders are filled as a user fills them: ``<message>`` with a key
``simulate`` printed, ``<run-id>`` with the run ``runs list`` printed.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.test_demo import _clean_env
from tests.acceptance.test_up import _wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# What the console script runs, from this checkout (PYTHONPATH below).
TIDEWAY = [sys.executable, "-c", "from streams.cli.main import main; main()"]

# What the text around the tour says each command prints (beyond the quoted words).
EXPECTED: dict[str, tuple[str, ...]] = {
    "schema apply": ("applied weather-station v1 for tenant acme",),
    "schema test": ("outcome: processed",),
    "devices add": ("ws-001",),
    "devices credentials issue": ("acme.ws-001",),
    "devices show": ("ws-001", "weather-station"),
    "simulate": ("what Tideway should record", "m:default:"),
    "messages show": ("completed", "stages", "telemetry"),
    "dlq list": (),
    "sessions synth": (),
    "sessions upload": ("succeeded",),
    "runs list": ("default",),
    "runs show": ("parse",),
    "api-keys create": ("API key", "tw_"),
}


def tour() -> list[tuple[list[str], tuple[str, ...]]]:
    """The tour's commands (arguments after ``tideway``) with the words their comment
    quotes."""
    text = (REPO / "README.md").read_text()
    block = text.split("## A five-minute tour", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        if not line.startswith(".venv/bin/tideway "):
            continue  # a comment continued on its own line
        command, _, comment = line.partition("#")
        commands.append((shlex.split(command)[1:], tuple(re.findall(r'"([^"]+)"', comment))))
    return commands


def _area(args: list[str]) -> str:
    words = [a for a in args if not a.startswith("-")]
    for size in (3, 2, 1):
        if " ".join(words[:size]) in EXPECTED:
            return " ".join(words[:size])
    raise AssertionError(f"the test does not know what `tideway {' '.join(args)}` prints")


def test_the_readme_tour_works_as_written(tmp_path: Path) -> None:
    commands = tour()
    assert commands[0][0] == ["up"], commands[0]
    env = _clean_env(tmp_path)
    env["PYTHONPATH"] = str(REPO)
    env["TIDEWAY_CONFIG"] = str(tmp_path / "absent.toml")
    (tmp_path / "examples").symlink_to(REPO / "examples")  # the paths the README names
    up = subprocess.Popen([*TIDEWAY, "up"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    found: dict[str, str] = {}

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TIDEWAY, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    try:
        _wait_for(tmp_path / ".tideway" / "services.json", up)
        for args, quoted in commands[1:]:
            args = [a.replace("/tmp/race.csv", str(tmp_path / "race.csv")) for a in args]
            args = [found.get(a, a) for a in args]
            area = _area(args)
            done = run(args)
            if area == "messages show":  # the pipeline may not have reached it yet
                deadline = time.monotonic() + 60
                while "completed" not in done.stdout and time.monotonic() < deadline:
                    time.sleep(1)
                    done = run(args)
            assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
            assert "Traceback" not in done.stderr, done.stderr
            assert "Cannot lock file" not in done.stdout + done.stderr, done.stdout + done.stderr
            for words in (*quoted, *EXPECTED[area]):
                assert words in done.stdout, (args, words, done.stdout[-3000:])
            if area == "simulate":
                found["<message>"] = re.search(r"normal\s*│\s*(m:default:\S+)",
                                               done.stdout).group(1)  # type: ignore[union-attr]
            if area == "dlq list":  # the simulator's failures are statuses, not dead letters
                assert "ingestion_message_id" in done.stdout
                assert "m:default" not in done.stdout and "sim-" not in done.stdout
            if area == "runs list":
                found["<run-id>"] = re.search(r"│\s*([0-9a-f-]{36})\s*│",
                                              done.stdout).group(1)  # type: ignore[union-attr]
                assert "acme" not in done.stdout  # one tenant, as every other list
    finally:
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=120)
    assert up.returncode == 0, err[-3000:]
    for words in [*commands[0][1], "api-keys create"]:  # `up` says how to get a key
        assert words in out, out[-3000:]
    assert "Code: " not in out + err  # no raw chDB line


def test_the_tour_is_found_in_the_readme() -> None:
    """The parsing above found the tour (a README edit must not make the test vacuous)."""
    commands = [" ".join(args[:2]) for args, _ in tour()]
    assert commands[0] == "up" and "simulate --devices" in commands
    assert "messages show" in commands and "runs show" in commands
    assert os.path.exists(REPO / "examples" / "weather-station.yaml")
