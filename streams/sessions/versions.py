"""The versions a new processing run pins (spec 000 §6.2): derived from the code itself.

Each version is the package version plus a short hash of the source files it covers, so a
change to a parser or to the fusion filter changes the version without anyone remembering to
bump a constant, and ``tideway sessions reprocess`` pins exactly the code that will run:

- ``parser``: the formats and the intake/parse/normalise/align stages;
- ``pipeline``: every session stage and the job engine's pure DAG, gating and policies;
- ``fusion``: the GNSS/IMU fusion and its health summary.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from functools import cache
from pathlib import Path

from streams.jobs.model import RunVersions

__all__ = ["current_versions"]

_ROOT = Path(__file__).resolve().parents[2]
_PARSER = (
    "stages/batch/formats",
    "stages/batch/artifact_validate.py",
    "stages/batch/artifact_classify.py",
    "stages/batch/parse_raw.py",
    "stages/batch/normalise_units.py",
    "stages/batch/time_align.py",
    "stages/batch/canonical.py",
)
_PIPELINE = ("stages/batch", "stages/jobs")
_FUSION = ("stages/batch/fuse_gnss_imu.py", "stages/batch/fuse_quality_summary.py")


def _package_version() -> str:
    try:
        return importlib.metadata.version("tideway")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _digest(paths: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    files: list[Path] = []
    for rel in paths:
        p = _ROOT / rel
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    for f in files:
        if f.is_file():
            h.update(f.relative_to(_ROOT).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:10]


@cache
def current_versions() -> RunVersions:
    """The versions of the code in this process (computed once)."""
    base = _package_version()
    return RunVersions(
        parser=f"{base}+{_digest(_PARSER)}",
        pipeline=f"{base}+{_digest(_PIPELINE)}",
        fusion=f"{base}+{_digest(_FUSION)}",
    )
