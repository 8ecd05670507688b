"""A fresh clone without ``../shared`` beside it must still collect every test.

The real-device corpora are third-party files kept outside the repository; a test module that
read one at import time stopped the whole run at collection. This runs pytest's collection in a
subprocess with the shared folder pointed at an empty directory and ``CI`` unset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.shared_data import REPO_ROOT


def test_collection_needs_no_shared_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["TIDEWAY_SHARED_DIR"] = str(tmp_path / "no-shared-here")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "error" not in done.stdout.lower().splitlines()[-1]
    assert " collected" in done.stdout or "tests collected" in done.stdout
