"""The real-device files in ``../shared/data``, read by tests that need them.

Those files are third-party (receiver logs, FIT files from other projects' test corpora) and are
never copied into this repository: they sit in a ``shared/`` folder beside the checkout, or in
the folder ``TIDEWAY_SHARED_DIR`` names. A test asks for a file here when it *runs*, never at
import time, so a fresh clone without the folder still collects every test. Without the folder
a test that needs it is skipped with a message naming the folder it looked in; under
``CI=true`` it fails instead, so CI can never go green by skipping.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = Path(os.environ.get("TIDEWAY_SHARED_DIR", REPO_ROOT.parent / "shared"))
DATA_DIR = SHARED_DIR / "data"


def skip_or_fail(message: str) -> None:
    """Skip the running test locally; fail it when ``CI=true``."""
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def require(path: Path) -> Path:
    """``path`` when it exists; otherwise skip (locally) or fail (CI), naming what is missing."""
    if not path.exists():
        skip_or_fail(
            f"needs {path}, which is absent: the real-device data lives in {DATA_DIR} "
            "(a shared/ folder beside the checkout, or set TIDEWAY_SHARED_DIR)"
        )
    return path


def data_file(*parts: str) -> Path:
    """A file or folder under ``shared/data`` (for example ``data_file("nmea", "bt451.log")``)."""
    return require(DATA_DIR.joinpath(*parts))


@dataclass(frozen=True, kw_only=True)
class SharedFile:
    """A real-device file named when tests are collected and read only when one runs."""

    folder: str
    name: str

    def read_bytes(self) -> bytes:
        return data_file(self.folder, self.name).read_bytes()

    def __str__(self) -> str:
        return self.name


def contents(data: bytes | SharedFile) -> bytes:
    """The bytes of a parametrised input that is either literal bytes or a shared file."""
    return data.read_bytes() if isinstance(data, SharedFile) else data
