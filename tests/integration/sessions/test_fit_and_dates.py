"""FIT files and dateless NMEA logs through the whole DAG (upload -> intake -> workers).

Every real FIT file in ``shared/data/fit`` ends with the outcome its README row describes; a
synthetic FIT session finds its true laps; an NMEA log with no date is refused with
``NO_SESSION_DATE`` unless the upload gives the date.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from functools import reduce
from pathlib import Path
from typing import Any

import pytest

from schemas import error_codes as codes
from stages.batch import formats
from stages.batch.formats import compression
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.sessions.progress import RunProgress, wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_system
from tests.shared_data import SharedFile


async def _run(
    settings: Settings,
    path: Path,
    device: str,
    config: dict[str, Any] | None = None,
    *,
    date: dt.date | None = None,
) -> RunProgress:
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    async with running_system(settings, executors):
        receipt = await upload_files(
            settings, tenant="acme", device=device, paths=[path], config=config, date=date
        )
        return await wait_for_run(
            settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash, timeout_s=240
        )


def _copy(tmp_path: Path, f: SharedFile) -> Path:
    path = tmp_path / f.name  # uploaded from a scratch copy; never copied into the repo
    path.write_bytes(f.read_bytes())
    return path


# file, parse failure code (None: parse succeeds)
REAL = [
    ("2019-02-17-062644-ELEMNT-297E-195-0.fit", None),
    ("activity-small-fenix2-run.fit", None),
    ("garmin-edge-820-bike.fit", None),
    ("garmin-fenix-5-run.fit", None),
    ("developer-types-sample.fit", None),
    ("coros-pace-2-cycling-misaligned-fields.fit", None),
    ("compressed-speed-distance.fit", None),
    # Cut off in its last message: read up to the cut (issue 32 item 7), not refused whole.
    ("activity-unexpected-eof.fit", None),
    ("Settings.fit", codes.FIT_NOT_ACTIVITY),
    ("activity-settings-corruptheader.fit", codes.FIT_CORRUPT),
]


@pytest.mark.parametrize(("name", "code"), REAL, ids=[n for n, _ in REAL])
async def test_real_fit_file_through_the_dag(
    settings: Settings, pool: Any, tmp_path: Path, name: str, code: str | None
) -> None:
    path = _copy(tmp_path, SharedFile(folder="fit", name=name))
    final = await _run(settings, path, "watch-1")
    if code is not None:
        # Refused at parse, non-retriable: one attempt, nothing downstream ran.
        assert final.status == "failed", final
        assert final.jobs["parse_raw"] == "failed"
        async with pool.acquire() as conn:
            attempts = await conn.fetch(
                "SELECT a.error_sub_type FROM job_attempts a JOIN jobs j ON j.id = a.job_id"
                " WHERE j.run_id = $1 AND j.job_type = 'parse_raw'",
                final.run_id,
            )
            derived = await conn.fetchval(
                "SELECT count(*) FROM derived_datasets WHERE run_id = $1", final.run_id
            )
        assert [a["error_sub_type"] for a in attempts] == [code]
        assert derived == 0  # nothing half-written
        return
    assert final.jobs["parse_raw"] == "succeeded", final
    assert final.status in {"succeeded", "partial"}, final
    if name == "compressed-speed-distance.fit":
        # An indoor session: no position, so the GNSS features are unavailable, with the
        # reason the docs give (it was NO_GNSS_STREAM, and the laps report said null).
        assert final.features_available.get("laps") is False
        for feature in ("laps", "segments", "lap_compare"):
            assert final.feature_reasons[feature] == "NO_POSITION_DATA", final
        assert final.jobs["detect_laps"] == "skipped"
        assert final.status == "succeeded"  # legitimately gated jobs are not a failure
        assert any("--date" in note for note in final.notes)  # dated from the FIT epoch
        laps = await _laps_report(settings, pool, final.run_id)
        assert (laps.reason, laps.laps) == ("NO_POSITION_DATA", [])
    else:
        assert final.jobs["time_align"] == "succeeded"
    if name == "activity-unexpected-eof.fit":
        assert final.notes == (f"{name} is cut off at byte 768 (3 bytes missing): read up to "
                               "the cut, 14 records",)
        async with pool.acquire() as conn:
            parse = await conn.fetchval(
                "SELECT output FROM jobs WHERE run_id = $1 AND job_type = 'parse_raw'",
                final.run_id,
            )
        assert parse["truncated"] == [name] and parse["rows"]["gnss"] == 14


async def _laps_report(settings: Settings, pool: Any, run_id: Any) -> Any:
    from streams.objects import ObjectStore
    from streams.views.laps import session_laps

    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT session_id, tenant_id FROM processing_runs WHERE id = $1", run_id
        )
        store = ObjectStore(settings.objects())
        return await session_laps(conn, store, row["tenant_id"], row["session_id"])


async def test_fit_with_relative_timestamps_takes_the_upload_date(
    settings: Settings, pool: Any, tmp_path: Path
) -> None:
    """Issue 32 item 7: a FIT file whose timestamps count from power-on was dated 1990 with no
    way to give the real date; the upload's date now dates it."""
    path = _copy(tmp_path, SharedFile(folder="fit", name="compressed-speed-distance.fit"))
    final = await _run(settings, path, "watch-2", date=dt.date(2015, 3, 1))
    assert final.status == "succeeded" and final.notes == (), final
    async with pool.acquire() as conn:
        t0 = await conn.fetchval(
            "SELECT output -> 't0_us' FROM jobs WHERE run_id = $1 AND job_type = 'time_align'",
            final.run_id,
        )
    start = dt.datetime.fromtimestamp(int(t0) / 1e6, dt.UTC)
    assert start.date() == dt.date(2015, 3, 1), start


async def test_synthetic_fit_session_finds_its_true_laps(
    settings: Settings, pool: Any, tmp_path: Path
) -> None:
    session = await asyncio.to_thread(synthesize, laps=3, imu_hz=50, gnss_hz=10, seed=3)
    truth = session.truth.truth_json()
    path = tmp_path / "session.fit"
    path.write_bytes(formats.write("fit", {"gnss": session.gnss, "imu": session.imu}))
    final = await _run(settings, path, "kart-9", {"start_finish": truth["start_finish"]})
    assert final.status == "succeeded", final
    assert final.summary["laps"]["count"] == truth["lap_count"] == 3


def _dateless_log() -> bytes:
    lines = []
    for i in range(30):
        lat = 4807.038 + i * 0.01
        body = f"GPGGA,1200{i:02d}.00,{lat:.3f},N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"
        cs = reduce(lambda a, b: a ^ b, body.encode(), 0)
        lines.append(f"${body}*{cs:02X}")
    return ("\r\n".join(lines) + "\r\n").encode()


async def test_dateless_nmea_log_is_refused_without_a_date(
    settings: Settings, pool: Any, tmp_path: Path
) -> None:
    path = tmp_path / "nodate.nmea"
    path.write_bytes(_dateless_log())
    final = await _run(settings, path, "gps-1")
    assert final.status == "failed", final
    assert final.jobs["parse_raw"] == "failed"
    async with pool.acquire() as conn:
        job = await conn.fetchrow(
            "SELECT attempt_count, last_error_code, last_error_message FROM jobs"
            " WHERE run_id = $1 AND job_type = 'parse_raw'",
            final.run_id,
        )
    assert (job["attempt_count"], job["last_error_code"]) == (1, codes.NO_SESSION_DATE)
    assert "--date" in job["last_error_message"]


async def test_dateless_nmea_log_takes_the_upload_date(
    settings: Settings, pool: Any, tmp_path: Path
) -> None:
    path = tmp_path / "nodate.nmea"
    path.write_bytes(_dateless_log())
    final = await _run(settings, path, "gps-2", date=dt.date(2024, 6, 1))
    assert final.jobs["parse_raw"] == "succeeded", final
    async with pool.acquire() as conn:
        config = await conn.fetchval(
            "SELECT config FROM processing_runs WHERE id = $1", final.run_id
        )
    assert "2024-06-01" in str(config)


async def test_cli_upload_wait_shows_the_real_code_and_its_hint(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 32 item 7: ``upload --wait`` said ``parse_raw: PARSE_RAW_FAILED`` (a reason code
    errors.md does not list) for a log without a date; it shows NO_SESSION_DATE and how to
    fix it (``--date``)."""
    import orjson
    from typer.testing import CliRunner

    from streams.cli.main import app

    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", settings.postgres())
    monkeypatch.setenv("TIDEWAY_NATS_URL", settings.nats())
    monkeypatch.setenv("TIDEWAY_NAMESPACE", settings.namespace)
    monkeypatch.setenv("TIDEWAY_OBJECT_STORE", settings.objects())
    monkeypatch.setenv("TIDEWAY_DEFAULT_TENANT", "acme")
    log = tmp_path / "nodate.nmea"
    log.write_bytes(_dateless_log())
    async with running_system(settings):
        as_json = await asyncio.to_thread(
            CliRunner().invoke, app,
            ["sessions", "upload", str(log), "--device", "gps-4", "--wait", "--json"],
        )
        log.write_bytes(_dateless_log() + b"\r\n")  # another file: another session and run
        text = await asyncio.to_thread(
            CliRunner().invoke, app, ["sessions", "upload", str(log), "--device", "gps-5", "--wait"]
        )
    assert as_json.exit_code == 3, as_json.output
    data = orjson.loads(as_json.output)
    assert data["failure_reason"] == "parse_raw: NO_SESSION_DATE"
    [err] = data["errors"]
    assert (err["job"], err["code"], err["critical"]) == ("parse_raw", "NO_SESSION_DATE", True)
    assert "--date" in err["message"] and "--date YYYY-MM-DD" in err["hint"]
    assert text.exit_code == 3
    assert "parse_raw: NO_SESSION_DATE" in text.output and "PARSE_RAW_FAILED" not in text.output
    assert "hint:" in text.output and "--date YYYY-MM-DD" in text.output


async def test_cli_synth_fit_and_upload_with_date(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, pool: Any, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from streams.cli.main import app

    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", settings.postgres())
    monkeypatch.setenv("TIDEWAY_NATS_URL", settings.nats())
    monkeypatch.setenv("TIDEWAY_NAMESPACE", settings.namespace)
    monkeypatch.setenv("TIDEWAY_OBJECT_STORE", settings.objects())
    monkeypatch.setenv("TIDEWAY_DEFAULT_TENANT", "acme")

    async def cli(*args: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, app, list(args))

    out = tmp_path / "synth.fit.gz"
    result = await cli("sessions", "synth", "--laps", "1", "--format", "fit", "--out", str(out))
    assert result.exit_code == 0, result.output
    synth = formats.read("fit", compression.decompress(out.read_bytes(), max_bytes=1 << 30))
    assert synth.streams["gnss"].num_rows > 0

    bad = await cli("sessions", "upload", str(out), "--device", "d", "--date", "1st June")
    assert bad.exit_code != 0 and "YYYY-MM-DD" in f"{bad.output}{bad.exception}"

    log = tmp_path / "nodate.nmea"
    log.write_bytes(_dateless_log())
    async with running_system(settings):
        result = await cli(
            "sessions", "upload", str(log), "--device", "gps-3", "--date", "2024-06-01",
            "--wait", "--json",
        )
    assert result.exit_code == 0, result.output
    async with pool.acquire() as conn:
        config = await conn.fetchval(
            "SELECT config FROM processing_runs ORDER BY created_at DESC LIMIT 1"
        )
    assert "2024-06-01" in str(config)


async def test_api_upload_date_field(settings: Settings, pool: Any) -> None:
    import aiohttp

    from streams.api.keys import create_api_key
    from tests.integration.sessions.test_api import api_client

    async with pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="test")
    headers = {"Authorization": f"Bearer {key.secret}"}
    async with running_system(settings), api_client(settings, pool) as client:
        bad = aiohttp.FormData()
        bad.add_field("device", "gps-4")
        bad.add_field("date", "yesterday")
        bad.add_field("file", _dateless_log(), filename="a.nmea")
        resp = await client.post("/v1/sessions", data=bad, headers=headers)
        assert resp.status == 400, await resp.text()

        form = aiohttp.FormData()
        form.add_field("device", "gps-4")
        form.add_field("date", "2024-06-01")
        form.add_field("file", _dateless_log(), filename="a.nmea")
        resp = await client.post("/v1/sessions", data=form, headers=headers)
        assert resp.status == 202, await resp.text()
        receipt = await resp.json()
        final = await wait_for_run(settings, run_id=receipt["run_id"], timeout_s=120)
        assert final.jobs["parse_raw"] == "succeeded", final
        run = await (await client.get(f"/v1/runs/{receipt['run_id']}", headers=headers)).json()
        assert run["config"] == {"session_date": "2024-06-01"}
