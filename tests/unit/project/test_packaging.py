"""Packaging basics: the licence, ``tideway --version``, ``py.typed`` and the console's files in
the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.cli.main import app
from tests.shared_data import REPO_ROOT


def test_licence_is_the_full_apache_2_text() -> None:
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_version_option_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"tideway {version('tideway')}"


@pytest.mark.slow
def test_wheel_carries_py_typed_the_licence_and_the_console(tmp_path: Path) -> None:
    # The wheel, not the editable install: what other projects install is what must be typed.
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
         str(REPO_ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("tideway-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"schemas/py.typed", "stages/py.typed", "streams/py.typed"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
               for n in names), sorted(n for n in names if "dist-info" in n)
    # Every file of the web console (served by `tideway api` at /, offline: nothing from a CDN).
    console = REPO_ROOT / "streams" / "api" / "console"
    shipped = {p.relative_to(REPO_ROOT).as_posix() for p in console.rglob("*") if p.is_file()}
    assert "streams/api/console/index.html" in shipped
    assert shipped <= names, sorted(shipped - names)
