"""The pure-stage job body: verified inputs, lazy datasets, reuse on retry, failures as values."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.objects import ObjectStore
from streams.sessions.datasets import output_prefix, read_table
from streams.sessions.stage_job import VERIFIED, InputRef, StageJob, _VerifiedTables, run_stage_job
from tests.unit.stages.batch.formats.nmea_data import log

NMEA = "ublox-zed-f9p-nmea.log"


@pytest.fixture(autouse=True)
def _fresh_table_cache() -> None:
    VERIFIED.clear()


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore(str(tmp_path / "objects"))


def _artifact(store: ObjectStore, data: bytes, name: str = NMEA) -> InputRef:
    obj = store.put_artifact("acme", [data])
    return InputRef(name=name, url=obj.url, sha256=obj.sha256)


def _job(store: ObjectStore, name: str, stage: str, key: str, **kw: object) -> StageJob:
    return StageJob(
        store_root=store.root_url.removeprefix("file://"),
        run_id="run-1",
        job_name=name,
        job_type=name,
        stage=stage,
        key=key,
        prefix=output_prefix("run-1", name, key),
        **kw,  # type: ignore[arg-type]
    )


def test_parse_then_normalise_reads_verified_upstream(store: ObjectStore) -> None:
    art = _artifact(store, log(NMEA))
    parsed = run_stage_job(
        _job(store, "parse_raw", "stages.batch.parse_raw:run", "k" * 64, artifacts=(art,))
    )
    assert parsed.failure is None and parsed.outputs is not None
    by_name = {d.name: d for d in parsed.outputs.datasets}
    assert set(by_name) == {"gnss", "imu", "aux"}
    assert by_name["gnss"].rows > 0
    assert parsed.outputs.summary["capabilities"]["imu"] is False

    inputs = tuple(
        InputRef(name=d.name, url=d.url, sha256=d.sha256) for d in parsed.outputs.datasets
    )
    norm = run_stage_job(
        _job(
            store,
            "normalise_units",
            "stages.batch.normalise_units:run",
            "n" * 64,
            inputs=inputs,
            summaries={"parse_raw": parsed.outputs.summary},
        )
    )
    assert norm.failure is None and norm.outputs is not None
    assert {d.name for d in norm.outputs.datasets} == {"gnss", "imu", "aux"}
    assert set(norm.inputs_read) == {"gnss", "imu", "aux"}


def test_a_retry_reuses_promoted_outputs_without_running_the_stage(store: ObjectStore) -> None:
    art = _artifact(store, log(NMEA))
    job = _job(store, "parse_raw", "stages.batch.parse_raw:run", "r" * 64, artifacts=(art,))
    first = run_stage_job(job)
    second = run_stage_job(job)
    assert first.outputs is not None and second.outputs is not None
    assert not first.outputs.reused and second.outputs.reused
    assert second.outputs.datasets == first.outputs.datasets
    assert "stage_s" in first.timings and "stage_s" not in second.timings
    assert len(store.list(job.prefix)) == 4  # three datasets and one manifest, written once


def test_a_tampered_artifact_fails_non_retriably(store: ObjectStore, tmp_path: Path) -> None:
    art = _artifact(store, b"$GPGGA,1\n")
    (tmp_path / "objects" / store.key(art.url)).write_bytes(b"$GPGGA,2\n")
    run = run_stage_job(
        _job(
            store,
            "artifact_validate",
            "stages.batch.artifact_validate:run",
            "v" * 64,
            artifacts=(art,),
        )
    )
    assert run.outputs is None and run.failure is not None
    assert run.failure.code == "CHECKSUM_MISMATCH" and not run.failure.retriable


def test_a_stage_error_keeps_its_code(store: ObjectStore) -> None:
    art = _artifact(store, b"this is not a session file at all\n" * 20, name="notes.txt")
    run = run_stage_job(
        _job(
            store,
            "artifact_validate",
            "stages.batch.artifact_validate:run",
            "u" * 64,
            artifacts=(art,),
        )
    )
    assert run.failure is not None
    assert run.failure.code == "UNSUPPORTED_FORMAT" and not run.failure.retriable
    assert store.list("datasets") == []  # nothing promoted for a failed job


def test_a_table_verified_once_is_reused_by_later_jobs(store: ObjectStore) -> None:
    art = _artifact(store, log(NMEA))
    parsed = run_stage_job(
        _job(store, "parse_raw", "stages.batch.parse_raw:run", "p" * 64, artifacts=(art,))
    )
    assert parsed.outputs is not None
    inputs = tuple(
        InputRef(name=d.name, url=d.url, sha256=d.sha256) for d in parsed.outputs.datasets
    )
    summaries = {"parse_raw": parsed.outputs.summary}
    # The writer remembered its outputs, exactly as they read back from the store.
    for d in parsed.outputs.datasets:
        cached = VERIFIED.get(d.sha256)
        assert cached is not None
        assert cached.equals(read_table(store, d.url, sha256=d.sha256), check_metadata=True)
    VERIFIED.clear()  # as if the next job ran in another process
    first = run_stage_job(
        _job(
            store,
            "normalise_units",
            "stages.batch.normalise_units:run",
            "1" * 64,
            inputs=inputs,
            summaries=summaries,
        )
    )
    second = run_stage_job(
        _job(
            store,
            "normalise_units",
            "stages.batch.normalise_units:run",
            "2" * 64,
            inputs=inputs,
            summaries=summaries,
        )
    )
    assert first.timings["inputs_cached"] == 0 and second.timings["inputs_cached"] == 3
    assert first.outputs is not None and second.outputs is not None
    assert [d.sha256 for d in first.outputs.datasets] == [d.sha256 for d in second.outputs.datasets]


def test_the_table_cache_is_bounded() -> None:
    import pyarrow as pa

    cache = _VerifiedTables(max_bytes=3000)
    tables = {k: pa.table({"x": pa.array(range(125), pa.int64())}) for k in "abcd"}  # 1000 B
    for k, t in tables.items():
        cache.put(k, t)
    assert len(cache) == 3 and cache.get("a") is None  # the oldest went first
    assert cache.get("b") is tables["b"]
    cache.put("e", tables["a"])
    assert cache.get("c") is None and cache.get("b") is not None  # b was used recently
    cache.put("huge", pa.table({"x": pa.array(range(1000), pa.int64())}))
    assert cache.get("huge") is None  # larger than the whole cache: never kept


def test_only_the_stages_that_look_at_the_artifact_read_it(
    store: ObjectStore, tmp_path: Path
) -> None:
    art = _artifact(store, log(NMEA))
    parsed = run_stage_job(
        _job(store, "parse_raw", "stages.batch.parse_raw:run", "a" * 64, artifacts=(art,))
    )
    assert parsed.outputs is not None
    # Gone from the store: a job that reads it fails, one that never looks does not notice.
    (tmp_path / "objects" / store.key(art.url)).unlink()
    VERIFIED.clear()
    inputs = tuple(
        InputRef(name=d.name, url=d.url, sha256=d.sha256) for d in parsed.outputs.datasets
    )
    norm = run_stage_job(
        _job(
            store,
            "normalise_units",
            "stages.batch.normalise_units:run",
            "b" * 64,
            artifacts=(art,),
            inputs=inputs,
            summaries={"parse_raw": parsed.outputs.summary},
        )
    )
    assert norm.failure is None and norm.timings["artifacts_s"] == 0.0
    again = run_stage_job(
        _job(store, "parse_raw", "stages.batch.parse_raw:run", "c" * 64, artifacts=(art,))
    )
    assert again.failure is not None and again.failure.code == "OBJECT_MISSING"


def test_an_artifact_verified_once_is_not_read_again_in_the_process(
    store: ObjectStore, tmp_path: Path
) -> None:
    data = log(NMEA)
    art = _artifact(store, data)
    first = run_stage_job(
        _job(
            store,
            "artifact_validate",
            "stages.batch.artifact_validate:run",
            "d" * 64,
            artifacts=(art,),
        )
    )
    assert first.failure is None
    assert VERIFIED.get_blob(art.sha256) == data
    # Replaced on the store after it was verified: the next job computes from the verified
    # bytes it already holds (the content recorded for the artifact), not from the new ones.
    (tmp_path / "objects" / store.key(art.url)).write_bytes(b"$GPGGA,2\n")
    classified = run_stage_job(
        _job(
            store,
            "artifact_classify",
            "stages.batch.artifact_classify:run",
            "e" * 64,
            artifacts=(art,),
        )
    )
    assert classified.failure is None and classified.outputs is not None
    assert classified.outputs.summary["format"] == "nmea"
    VERIFIED.clear()  # another process: it reads the store, and the hash catches the change
    other = run_stage_job(
        _job(
            store,
            "artifact_classify",
            "stages.batch.artifact_classify:run",
            "f" * 64,
            artifacts=(art,),
        )
    )
    assert other.failure is not None and other.failure.code == "CHECKSUM_MISMATCH"
