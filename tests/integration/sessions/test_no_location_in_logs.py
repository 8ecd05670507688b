"""No raw location value in any log line or attempt error message (spec 000 §15).

A synthetic session with known coordinates goes through intake and the whole DAG with every
log record of the process captured as JSON lines (DEBUG, so nothing is filtered out); then
every line and every ``job_attempts.error_message`` is searched for the session's
coordinates, formatted at several precisions.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stages.batch import formats
from stages.batch.synth import synthesize
from streams.config import Settings
from streams.sessions.progress import wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from tests.integration.json_logs import captured_json_logs
from tests.integration.sessions.conftest import running_system


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    with captured_json_logs("DEBUG") as out:
        yield out


def _write_session(path: Path) -> set[str]:
    """Write a CSV session; the spellings of its coordinates a leak would show."""
    session = synthesize(laps=2, imu_hz=50, gnss_hz=10, seed=11)
    path.write_bytes(formats.write("csv", {"gnss": session.gnss, "imu": session.imu}))
    spellings: set[str] = set()
    for column in ("lat_deg", "lon_deg"):
        for value in session.gnss.column(column).to_pylist():
            if value is None:
                continue
            spellings |= {f"{value:.4f}", f"{value:.5f}", f"{value:.6f}", repr(value)}
    return spellings


async def test_a_session_through_the_dag_leaves_no_coordinates_in_logs_or_errors(
    settings: Settings, pool: Any, tmp_path: Path, captured: io.StringIO
) -> None:
    path = tmp_path / "session.csv"
    spellings = await asyncio.to_thread(_write_session, path)
    assert len(spellings) > 100
    async with running_system(settings, SessionExecutors(settings, compute="thread")):
        receipt = await upload_files(settings, tenant="acme", device="car-9", paths=[path],
                                     config={})
        final = await wait_for_run(settings, tenant="acme",
                                   artifact_set_hash=receipt.artifact_set_hash, timeout_s=120)
    assert final.status in {"succeeded", "partial"}, final

    lines = captured.getvalue().splitlines()
    assert any("job attempt finished" in line for line in lines)  # the logs were captured
    async with pool.acquire() as conn:
        errors = [r["error_message"] for r in await conn.fetch(
            "SELECT error_message FROM job_attempts WHERE error_message IS NOT NULL")]
    leaks = [(text, s) for text in [*lines, *errors] for s in spellings if s in text]
    assert not leaks, leaks[:5]
