"""The stage pool's lanes: which compute process a body is given (no process is started)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.sessions.stage_executors import SessionExecutors, _ranks
from streams.sessions.stage_job import InputRef, StageJob

IMU = InputRef(name="imu", url="file:///x/imu.parquet", sha256="a" * 64)
GNSS = InputRef(name="gnss", url="file:///x/gnss.parquet", sha256="b" * 64)


def _spec(job: str, *inputs: InputRef) -> StageJob:
    return StageJob(
        store_root="/x", run_id="r", job_name=job, job_type=job, stage=DEFAULT_DAG.stages[job],
        key="k" * 64, prefix=f"datasets/r/{job}", inputs=inputs,
    )  # fmt: skip


@pytest.fixture
async def table(tmp_path: Path) -> AsyncIterator[SessionExecutors]:
    settings = Settings(object_store=str(tmp_path / "objects"), data_dir=tmp_path)
    ex = SessionExecutors(settings, compute="process", workers=2, dag=DEFAULT_DAG)
    try:
        yield ex
    finally:
        await ex.aclose()


def test_the_critical_branch_ranks_first() -> None:
    rank = _ranks(DEFAULT_DAG)
    assert rank["artifact_validate"] > rank["parse_raw"] > rank["time_align"]
    # Both leave time_align and lead as far; fusion is the heavy one.
    assert rank["fuse_gnss_imu"] > rank["downsample_L0"]
    assert rank["detect_laps"] > rank["fuse_quality_summary"]
    assert rank["publish_session"] == (1, False)


async def test_a_body_goes_to_the_idle_process_holding_its_inputs(
    table: SessionExecutors,
) -> None:
    first, second = table._process_lanes()
    second.remember({IMU.sha256: 20_000_000, GNSS.sha256: 2_000_000})
    lane = await table._take_lane(_spec("normalise_units", IMU, GNSS))
    assert lane is second and second.busy and not first.busy
    # The holder is busy: the next body takes the idle one rather than wait.
    other = await table._take_lane(_spec("time_align", IMU, GNSS))
    assert other is first
    # None idle: a body waits for the first process to come free.
    waiting = asyncio.create_task(table._take_lane(_spec("downsample_L0", IMU)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    table._release(first)
    assert await asyncio.wait_for(waiting, 5) is first
    table._release(first)
    table._release(second)
    # Nothing held anywhere: the first of equals.
    assert await table._take_lane(_spec("parse_raw")) is first


async def test_jobs_claimed_together_let_the_critical_one_choose_first(
    table: SessionExecutors,
) -> None:
    first, second = table._process_lanes()
    second.remember({IMU.sha256: 20_000_000, GNSS.sha256: 2_000_000})
    # downsample_L0 asks first, but fusion (as long a way to the end, and heavy) is given the
    # process holding time_align's outputs.
    l0, fusion = await asyncio.gather(
        table._take_lane(_spec("downsample_L0", IMU, GNSS)),
        table._take_lane(_spec("fuse_gnss_imu", IMU, GNSS)),
    )
    assert fusion is second and l0 is first


async def test_a_process_stopped_with_its_job_forgets_what_it_held(
    table: SessionExecutors,
) -> None:
    _, second = table._process_lanes()
    second.remember({IMU.sha256: 20_000_000})
    assert second.holds([IMU]) == 20_000_000
    second.forget()
    assert second.holds([IMU]) == 0
