"""Long stages ask their ``checkpoint`` inside their loops (issue 15 item 3)."""

from __future__ import annotations

import pytest

from stages.batch import fuse_gnss_imu, parse_raw
from stages.batch.contract import ArtifactBlob, StageInput, StageStopped
from tests.unit.stages.batch.sessions import session


class _StopAfter:
    """A checkpoint that lets ``calls`` checks pass, then says stop."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.asked = 0

    def __call__(self) -> None:
        self.asked += 1
        if self.asked > self.calls:
            raise StageStopped("stop")


def test_fusion_stops_at_a_checkpoint_inside_its_filter() -> None:
    s = session(laps=3, seed=5)
    inp = {"datasets": {"gnss": s.gnss, "imu": s.imu}}
    counted = _StopAfter(10**9)
    fuse_gnss_imu.run(StageInput(**inp, checkpoint=counted))
    # Both filter passes check every 1024 fixes (plus once before and after them).
    assert counted.asked >= 2 * (s.gnss.num_rows // 1024)
    stop = _StopAfter(counted.asked // 2)  # somewhere inside the filter passes
    with pytest.raises(StageStopped):
        fuse_gnss_imu.run(StageInput(**inp, checkpoint=stop))
    assert stop.asked == counted.asked // 2 + 1  # it stopped at once, computing nothing more


def test_parse_checks_between_files() -> None:
    blob = ArtifactBlob(name="a.nmea", data=b"", sha256="0" * 64)
    with pytest.raises(StageStopped):
        parse_raw.run(StageInput(artifacts=(blob,), checkpoint=_StopAfter(0)))
