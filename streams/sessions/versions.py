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

from stages.jobs.dag import DEFAULT_DAG
from streams.jobs.model import RunVersions

__all__ = ["current_versions", "group_files"]

_ROOT = Path(__file__).resolve().parents[2]


def _stage_files(group: str) -> tuple[str, ...]:
    """The source files of the DAG's stages declared in ``group`` (``JobSpec.version_group``):
    a job type moved to another group moves its code's digest with it."""
    modules = {
        spec.stage.partition(":")[0]
        for spec in DEFAULT_DAG.values()
        if spec.stage and spec.version_group == group
    }
    return tuple(sorted(m.replace(".", "/") + ".py" for m in modules))


# What the parser group's stages read besides their own module: the formats and the canonical
# sample layout they produce.
_PARSER = (*_stage_files("parser"), "stages/batch/formats", "stages/batch/canonical.py")
_PIPELINE = ("stages/batch", "stages/jobs")
_FUSION = _stage_files("fusion")


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


def group_files(group: str) -> tuple[str, ...]:
    """The source paths (files or folders, relative to the repository) a version covers."""
    return {"parser": _PARSER, "pipeline": _PIPELINE, "fusion": _FUSION}[group]
