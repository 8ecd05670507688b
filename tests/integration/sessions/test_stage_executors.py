"""Stage executors: names, idempotency keys, reuse on retry, error mapping.

Against a real (migrated) Postgres: an executor looks up its run's retry lineage and records
artifact lifecycle there (the rows these tests make up are simply not found).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stages.errors import StageError
from stages.jobs.dag import DEFAULT_DAG
from stages.jobs.errors import ErrorSource
from streams.config import Settings
from streams.errors import PermanentError
from streams.jobs.executor import ArtifactRef, JobContext, UpstreamDataset
from streams.jobs.failure import error_from_exception
from streams.jobs.model import ClaimedJob, DatasetRecord, JobResult, RunVersions
from streams.objects import ObjectStore
from streams.sessions.stage_executors import SessionExecutors, local_name, record_name
from streams.sessions.stage_job import VERIFIED
from tests.unit.stages.batch.formats.nmea_data import log

RUN = uuid.uuid4()
VERSIONS = RunVersions(parser="p1", pipeline="pl1", fusion="f1")


def _job(name: str, attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        run_id=RUN,
        tenant_id=uuid.uuid4(),
        name=name,
        job_type=name,
        pool="cpu",
        critical=True,
        heavy=False,
        priority=0,
        attempt=attempt,
        max_attempts=3,
        soft_timeout_s=60,
        hard_timeout_s=120,
        locked_by="w",
        locked_at=datetime.now(UTC),
    )


def _upstream(job: str, records: list[DatasetRecord]) -> dict[str, UpstreamDataset]:
    return {
        r.name: UpstreamDataset(
            name=r.name,
            job=job,
            dataset_type=r.dataset_type,
            storage_url=r.storage_url,
            content_hash=r.content_hash,
            schema_version=r.schema_version,
        )
        for r in records
    }


@pytest.fixture(autouse=True)
def _fresh_table_cache() -> None:
    VERIFIED.clear()  # tables verified by another test must not hide this test's corruption


@pytest.fixture
async def executors(tmp_path: Path, pg_dsn: str) -> AsyncIterator[SessionExecutors]:
    settings = Settings(
        object_store=str(tmp_path / "objects"), data_dir=tmp_path, postgres_dsn=pg_dsn
    )
    ex = SessionExecutors(settings, compute="thread", workers=1, dag=DEFAULT_DAG)
    try:
        yield ex
    finally:
        await ex.aclose()


def _artifact(ex: SessionExecutors, data: bytes, name: str) -> ArtifactRef:
    obj = ex.store.put_artifact("acme", [data])
    return ArtifactRef(
        id=uuid.uuid4(), sha256=obj.sha256, storage_url=obj.url, filename=name, bytes=obj.size
    )


def _ctx(name: str, *, attempt: int = 1, **kw: Any) -> JobContext:
    return JobContext(
        job=_job(name, attempt),
        session_id=uuid.uuid4(),
        versions=VERSIONS,
        config=kw.pop("config", {}),
        **kw,
    )


def test_canonical_streams_are_qualified_by_their_job() -> None:
    assert record_name("time_align", "gnss") == "time_align.gnss"
    assert record_name("downsample_L1", "gnss_L1") == "gnss_L1"
    assert local_name("time_align", "time_align.gnss") == "gnss"
    assert local_name("detect_laps", "laps") == "laps"


async def test_retry_reuses_outputs_and_chains(executors: SessionExecutors) -> None:
    data = log("neo-m8n.log")
    art = _artifact(executors, data, "neo.log")
    first: JobResult = await executors["parse_raw"](_ctx("parse_raw", artifacts=(art,)))
    retry: JobResult = await executors["parse_raw"](_ctx("parse_raw", attempt=2, artifacts=(art,)))
    assert {d.name for d in first.datasets} == {"parse_raw.gnss", "parse_raw.imu", "parse_raw.aux"}
    assert first.metrics["reused"] is False and retry.metrics["reused"] is True
    assert retry.idempotency_key == first.idempotency_key
    assert [d.storage_url for d in retry.datasets] == [d.storage_url for d in first.datasets]
    # Another config is another key, hence other outputs (never an overwrite).
    other = await executors["parse_raw"](
        _ctx("parse_raw", artifacts=(art,), config={"max_decompressed_bytes": 10**8})
    )
    assert other.idempotency_key != first.idempotency_key
    assert other.metrics["reused"] is False

    norm = await executors["normalise_units"](
        _ctx(
            "normalise_units",
            datasets=_upstream("parse_raw", list(first.datasets)),
            summaries={"parse_raw": first.summary},
        )
    )
    assert {d.name for d in norm.datasets} == {
        "normalise_units.gnss",
        "normalise_units.imu",
        "normalise_units.aux",
    }
    gnss = next(d for d in norm.datasets if d.name == "normalise_units.gnss")
    assert gnss.row_count and gnss.time_range_start is not None
    assert set(norm.metrics["inputs_read"]) == {"gnss", "imu", "aux"}


async def test_stage_errors_keep_their_code_and_are_not_retried(
    executors: SessionExecutors,
) -> None:
    art = _artifact(executors, b"plain text, not a session\n" * 10, "notes.txt")
    with pytest.raises(StageError) as err:
        await executors["artifact_validate"](_ctx("artifact_validate", artifacts=(art,)))
    recorded = error_from_exception(err.value)
    assert (recorded.code, recorded.retriable, recorded.source) == (
        "UNSUPPORTED_FORMAT",
        False,
        ErrorSource.STAGE,
    )


async def test_a_corrupt_upstream_dataset_is_a_checksum_failure(
    executors: SessionExecutors, tmp_path: Path
) -> None:
    data = log("neo-m8n.log")
    parsed = await executors["parse_raw"](
        _ctx("parse_raw", artifacts=(_artifact(executors, data, "neo.log"),))
    )
    VERIFIED.clear()  # the reader is another process: it has not seen these tables
    victim = next(d for d in parsed.datasets if d.name == "parse_raw.gnss")
    store = ObjectStore(executors.settings.objects())
    (tmp_path / "objects" / store.key(victim.storage_url)).write_bytes(b"garbage")
    with pytest.raises(PermanentError) as err:
        await executors["normalise_units"](
            _ctx(
                "normalise_units",
                datasets=_upstream("parse_raw", list(parsed.datasets)),
                summaries={"parse_raw": parsed.summary},
            )
        )
    assert err.value.code == "CHECKSUM_MISMATCH"
    assert error_from_exception(err.value).retriable is False
    await executors.aclose()


async def test_a_job_runs_in_the_process_that_holds_its_inputs(tmp_path: Path, pg_dsn: str) -> None:
    """Two compute processes: each job of a chain goes to the one that wrote (and so holds)
    its inputs, and reads none of them again; a job with nothing held goes to the first."""
    settings = Settings(
        object_store=str(tmp_path / "objects"), data_dir=tmp_path, postgres_dsn=pg_dsn
    )
    ex = SessionExecutors(settings, compute="process", workers=2, dag=DEFAULT_DAG)
    try:
        await ex.warm_up()
        for seed, name in enumerate(("neo-m8n.log", "ublox-zed-f9p-nmea.log")):
            art = _artifact(ex, log(name) + b"\r\n" * seed, name)
            parsed = await ex["parse_raw"](_ctx("parse_raw", artifacts=(art,)))
            norm = await ex["normalise_units"](
                _ctx(
                    "normalise_units",
                    datasets=_upstream("parse_raw", list(parsed.datasets)),
                    summaries={"parse_raw": parsed.summary},
                )
            )
            assert norm.metrics["timings"]["inputs_cached"] == 3
            aligned = await ex["time_align"](
                _ctx(
                    "time_align",
                    datasets={
                        **_upstream("parse_raw", list(parsed.datasets)),
                        **_upstream("normalise_units", list(norm.datasets)),
                    },
                    summaries={"parse_raw": parsed.summary, "normalise_units": norm.summary},
                )
            )
            assert aligned.metrics["timings"]["inputs_cached"] == 3
        lanes = ex._process_lanes()
        assert [lane.busy for lane in lanes] == [False, False]
        # One after the other, every job ran in the first process; the second holds nothing.
        assert lanes[0]._held and not lanes[1]._held
    finally:
        await ex.aclose()
