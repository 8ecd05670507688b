"""``python -m tests.golden update``: regenerate every golden record from a fresh run.

Makes sure the test services answer (``.ci/services.py``, as ``.ci/run`` does), then runs the
golden checker with ``TIDEWAY_UPDATE_GOLDEN=1`` so it writes the records instead of comparing
them (and removes the records of real files that are gone). ``python -m tests.golden check``
runs the same test without writing. Review ``git diff tests/golden`` before committing.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.golden import UPDATE_ENV
from tests.shared_data import REPO_ROOT

CHECKER = "tests/integration/sessions/test_golden_real_files.py"


def _service_env() -> dict[str, str]:
    """The ``TIDEWAY_TEST_*`` addresses ``.ci/services.py`` prints (starting what is down)."""
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / ".ci" / "services.py")],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    ).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'\"")
    return env


def main(argv: list[str]) -> int:
    if argv not in (["update"], ["check"]):
        print(__doc__, file=sys.stderr)
        return 2
    env = {**os.environ, **_service_env()}
    if argv == ["update"]:
        env[UPDATE_ENV] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", CHECKER]
    return subprocess.run(cmd, env=env, cwd=REPO_ROOT, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
