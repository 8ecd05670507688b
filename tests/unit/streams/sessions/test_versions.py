"""The versions a run pins cover exactly the code of the job types declared in each group."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.jobs.dag import DEFAULT_DAG, VERSION_GROUPS
from streams.sessions import versions

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("group", sorted(VERSION_GROUPS))
def test_every_path_of_a_group_exists(group: str) -> None:
    for rel in versions.group_files(group):
        assert (ROOT / rel).exists(), rel


def covered(path: str, group: str) -> bool:
    return any(path == rel or path.startswith(rel + "/") for rel in versions.group_files(group))


def test_each_stage_is_covered_by_the_group_its_job_type_declares() -> None:
    for spec in DEFAULT_DAG.values():
        if not spec.stage:
            continue
        path = spec.stage.partition(":")[0].replace(".", "/") + ".py"
        assert covered(path, spec.version_group), spec.name
        for other in set(VERSION_GROUPS) - {spec.version_group, "pipeline"}:
            assert not covered(path, other), (spec.name, other)


def test_fusion_stages_version_apart_from_the_parser() -> None:
    fusion = set(versions.group_files("fusion"))
    assert "stages/batch/fuse_gnss_imu.py" in fusion
    assert not fusion & set(versions.group_files("parser"))
