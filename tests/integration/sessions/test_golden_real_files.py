"""Every real-device file through the whole DAG, compared with its committed golden record.

All files of ``shared/data/fit`` and ``shared/data/nmea`` are uploaded into one running system
(intake and a worker, stages in threads, real Postgres, NATS, object store and chDB, as in
``test_fit_and_dates``) and each run's outcome becomes a record (``tests.golden.record``) built
from what the pipeline left: the run's status, jobs and summary in Postgres, and its derived
datasets read back from the object store. A record that differs from
``tests/golden/<kind>/<file>.json`` fails the test with one line per moved field; a real file
without a golden, or a golden without its file, fails too.

``TIDEWAY_UPDATE_GOLDEN=1`` (what ``python -m tests.golden update`` sets) writes the records
instead of comparing them.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest

from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.objects import ObjectStore
from streams.sessions.datasets import read_table
from streams.sessions.progress import RunProgress, wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from tests import golden
from tests.integration.sessions.conftest import running_system
from tests.shared_data import data_file

_FAILED_JOBS = """
SELECT job_type, last_error_code FROM jobs WHERE run_id = $1 AND state = 'failed'
ORDER BY job_type
"""
_DATASETS = """
SELECT name, storage_url, content_hash, row_count FROM derived_datasets WHERE run_id = $1
"""
# The analysis inputs a record reads back, by the plain names the stages see them under.
_READ_BACK = {"time_align.gnss": "gnss", "fused": "fused", "lap_metrics": "lap_metrics"}


def _real_files() -> list[tuple[str, Path]]:
    found = []
    for kind, pattern in golden.KINDS.items():
        found += [(kind, p) for p in sorted(data_file(kind).glob(pattern))]
    return found


async def _upload_and_wait(settings: Settings, kind: str, path: Path) -> RunProgress:
    device = re.sub(r"[^A-Za-z0-9_-]", "-", f"{kind}-{path.stem}")
    receipt = await upload_files(
        settings,
        tenant="acme",
        device=device,
        paths=[path],
        date=golden.NMEA_SESSION_DATE if kind == "nmea" else None,
    )
    return await wait_for_run(
        settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=600
    )


async def _record(settings: Settings, pool: Any, kind: str, path: Path, run: RunProgress) -> Any:
    async with pool.acquire() as conn:
        failed = await conn.fetch(_FAILED_JOBS, run.run_id)
        rows = await conn.fetch(_DATASETS, run.run_id)
    store = ObjectStore(settings.objects())
    datasets = {
        _READ_BACK[r["name"]]: await asyncio.to_thread(
            read_table, store, r["storage_url"], sha256=r["content_hash"]
        )
        for r in rows
        if r["name"] in _READ_BACK
    }
    return golden.record(
        kind=kind,
        name=path.name,
        session_date=golden.NMEA_SESSION_DATE if kind == "nmea" else None,
        status=run.status,
        jobs=run.jobs,
        refusal={r["job_type"]: r["last_error_code"] for r in failed},
        summary=run.summary,
        features_available=run.features_available,
        feature_reasons=run.feature_reasons,
        datasets=datasets,
        dataset_rows={r["name"]: r["row_count"] for r in rows},
    )


@pytest.mark.timeout(1200)
async def test_every_real_file_matches_its_golden_record(settings: Settings, pool: Any) -> None:
    files = _real_files()
    async with running_system(
        settings, SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    ):
        runs = await asyncio.gather(*(_upload_and_wait(settings, k, p) for k, p in files))
    fresh: dict[str, dict[str, Any]] = {kind: {} for kind in golden.KINDS}
    for (kind, path), run in zip(files, runs, strict=True):
        fresh[kind][path.name] = await _record(settings, pool, kind, path, run)

    if os.environ.get(golden.UPDATE_ENV) == "1":
        for kind, records in fresh.items():
            golden.golden_path(kind).write_text(golden.dumps(records), encoding="utf-8")
        return

    problems: list[str] = []
    for kind, records in fresh.items():
        where = golden.golden_path(kind)
        committed = golden.load(where) if where.exists() else {}
        for name, rec in records.items():
            if name not in committed:
                problems.append(f"{kind}/{name}: no golden record for this real file")
                continue
            problems += [
                f"{kind}/{name}: {line}" for line in golden.differences(committed[name], rec)
            ]
        problems += [
            f"{kind}/{name}: golden record of a file that is gone"
            for name in sorted(committed.keys() - records.keys())
        ]
    if problems:
        pytest.fail(
            "the pipeline's results on the real files differ from the golden records "
            f"(if intended, run `{golden.UPDATE_COMMAND}` and review the diff):\n  "
            + "\n  ".join(problems),
            pytrace=False,
        )
