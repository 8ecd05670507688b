"""Artifacts move uploaded -> validated | rejected and get their format (issue 15 item 5)."""

from __future__ import annotations

import asyncio

from stages.jobs.dag import DEFAULT_DAG, Dep, JobSpec
from streams.adapters import postgres
from streams.config import Settings
from streams.jobs import queue
from streams.objects import ObjectStore
from streams.sessions.stage_executors import SessionExecutors
from tests.integration.jobs.conftest import make_owner, start_run
from tests.integration.jobs.helpers import fast_settings, wait_run, workers
from tests.integration.sessions.conftest import NMEA_LOG
from tests.shared_data import data_file

INTAKE = {
    "artifact_validate": DEFAULT_DAG["artifact_validate"],
    "artifact_classify": JobSpec(
        name="artifact_classify", deps=(Dep(on="artifact_validate"),), pool="io"
    ),
}


async def _intake(settings: Settings, filename: str, data: bytes) -> tuple[str, object]:
    """Run validate and classify on one stored file; returns the run status and its row."""
    stored = ObjectStore(settings.objects()).put(f"artifacts/{filename}", data)
    table = SessionExecutors(settings, compute="thread", workers=1, dag=DEFAULT_DAG)
    conn = await postgres.connect(settings.postgres())
    try:
        owner = await make_owner(conn)
        await conn.execute(
            "UPDATE artifacts SET filename = $2, storage_url = $3, sha256 = $4, bytes = $5 "
            "WHERE id = $1",
            owner.artifact_id, filename, stored.url, stored.sha256, stored.size,
        )  # fmt: skip
        before = await conn.fetchrow(
            "SELECT status, format_detected, content_type FROM artifacts WHERE id = $1",
            owner.artifact_id,
        )
        assert tuple(before) == ("uploaded", None, None)
        run_id = await start_run(conn, owner, dag=INTAKE, channel=queue.jobs_channel(settings))
        async with workers(fast_settings(settings), {t: table[t] for t in INTAKE}):
            status = await wait_run(conn, run_id, within_s=30)
        row = await conn.fetchrow(
            "SELECT status, format_detected, content_type FROM artifacts WHERE id = $1",
            owner.artifact_id,
        )
        return status, tuple(row)
    finally:
        await conn.close()
        await table.aclose()


async def test_a_valid_file_is_validated_and_classified(settings: Settings) -> None:
    data = await asyncio.to_thread(data_file("nmea", NMEA_LOG).read_bytes)
    status, row = await _intake(settings, "drive.nmea", data)
    assert status == "succeeded"
    assert row == ("validated", "nmea", "text/plain")


async def test_a_file_refused_by_validation_is_rejected(settings: Settings) -> None:
    status, row = await _intake(settings, "notes.nmea", b"shopping list: eggs, milk\n")
    assert status == "failed"
    assert row == ("rejected", None, None)
