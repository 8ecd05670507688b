"""End to end: a synthetic session file -> upload -> intake -> workers run the real DAG."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from stages.batch import formats
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG
from streams.clickhouse import ClickHouse
from streams.config import Settings
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.sessions.progress import RunProgress, wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_system


def _write(path: Path, fmt: str, *, laps: int, seed: int) -> dict[str, Any]:
    session = synthesize(laps=laps, imu_hz=50, gnss_hz=10, seed=seed)
    path.write_bytes(formats.write(fmt, {"gnss": session.gnss, "imu": session.imu}))
    return session.truth.truth_json()


async def _run(
    settings: Settings, path: Path, device: str, config: dict[str, Any]
) -> tuple[RunProgress, Any]:
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    seen: list[RunProgress] = []
    async with running_system(settings, executors):
        receipt = await upload_files(
            settings, tenant="acme", device=device, paths=[path], config=config
        )
        final = await wait_for_run(
            settings,
            tenant="acme",
            artifact_set_hash=receipt.artifact_set_hash,
            on_progress=seen.append,
            timeout_s=120,
        )
    assert seen and seen[-1] == final
    return final, receipt


async def test_nmea_session_runs_without_fusion(
    settings: Settings, pool: Any, tmp_path: Path
) -> None:
    path = tmp_path / "session.nmea"
    truth = await asyncio.to_thread(_write, path, "nmea", laps=3, seed=3)
    # The run config carries the circuit's timing line (laps are counted at it).
    final, receipt = await _run(settings, path, "kart-1", {"start_finish": truth["start_finish"]})

    # NMEA carries no IMU: fusion is gated off with its reason, which is not a failure
    # (spec 000 §7.2: legitimately skipped optional jobs leave the run succeeded).
    assert final.status == "succeeded", final
    assert final.jobs["fuse_gnss_imu"] == "skipped"
    assert final.jobs["fuse_quality_summary"] == "skipped"
    assert final.features_available["fusion"] is False
    assert final.feature_reasons["fusion"] == "NO_IMU_STREAM"
    assert final.features_available["laps"] is True
    assert final.summary["laps"]["count"] == truth["lap_count"] == 3
    assert all(state in {"succeeded", "skipped"} for state in final.jobs.values())

    async with pool.acquire() as conn:
        datasets = {
            r["name"]: r
            for r in await conn.fetch(
                "SELECT name, storage_url, content_hash, row_count FROM derived_datasets"
                " WHERE run_id = $1",
                final.run_id,
            )
        }
        session = await conn.fetchrow(
            "SELECT active_run_id, query_ready, status FROM sessions WHERE id = $1",
            receipt.session_id,
        )
    assert {"parse_raw.gnss", "time_align.gnss", "gnss_L0", "gnss_L1", "gnss_L2", "laps"} <= set(
        datasets
    )
    assert "fused" not in datasets
    assert (session["active_run_id"], session["query_ready"], session["status"]) == (
        final.run_id,
        True,
        "ready",
    )
    # Every recorded dataset verifies against its content hash.
    store = ObjectStore(settings.objects())
    laps = read_table(
        store, datasets["laps"]["storage_url"], sha256=datasets["laps"]["content_hash"]
    )
    assert laps.num_rows == 3
    # And the query datasets are in ClickHouse, once.
    ch = ClickHouse(settings.clickhouse(), settings.clickhouse_database)
    rows = await ch.query_rows(
        f"SELECT count() FROM {ch.database}.session_gnss_l1 WHERE run_id = {{r:UUID}}",
        {"r": str(final.run_id)},
    )
    assert rows[0][0] == datasets["gnss_L1"]["row_count"] > 0


@pytest.mark.parametrize("fmt", ["csv"])
async def test_session_with_imu_runs_fusion(
    settings: Settings, pool: Any, tmp_path: Path, fmt: str
) -> None:
    path = tmp_path / f"session.{fmt}"
    truth = await asyncio.to_thread(_write, path, fmt, laps=2, seed=5)
    final, _ = await _run(settings, path, "kart-2", {"start_finish": truth["start_finish"]})
    assert final.status in {"succeeded", "partial"}, final
    assert final.jobs["fuse_gnss_imu"] == "succeeded"
    assert final.features_available["fusion"] is True
    assert final.summary["laps"]["count"] == truth["lap_count"]
    assert final.summary["materialised"]["session_fused"] > 0
