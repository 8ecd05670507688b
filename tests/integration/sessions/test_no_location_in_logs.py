"""No raw location value in any log line or attempt error message (spec 000 §15).

A synthetic session with known coordinates goes through intake and the whole DAG with every
log record of the process captured as JSON lines (DEBUG, so nothing is filtered out); then
every line and every ``job_attempts.error_message`` is searched for the session's
coordinates, formatted at several precisions.

Then hostile files and notices, each carrying distinctive coordinates (``51.123456789``,
``-0.987654321``) and a marker in the very cell, line, field or key that is refused: a CSV with
a bad cell, a ragged row and a time out of range, JSON Lines with a bad time and a line that
is not JSON, a GPX and an NMEA log with bad fields, a FIT file with a bad CRC and a cut-off
one (read up to the cut, with a note), a notice with a bad field and one with a bad
start/finish line. Every error they cause names the place and the
kind of problem; none holds the digits.
"""

from __future__ import annotations

import asyncio
import functools
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest

from stages.batch import formats
from stages.batch.synth import synthesize
from stages.jobs.dag import DEFAULT_DAG
from streams.config import Settings
from streams.names import Names
from streams.sessions.progress import wait_for_run
from streams.sessions.stage_executors import SessionExecutors
from streams.sessions.upload import upload_files
from streams.views.session_dead_letters import list_session_dead_letters
from tests.integration.json_logs import captured_json_logs
from tests.integration.sessions.conftest import running_system, wait_until


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
    async with running_system(
        settings, SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    ):
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


MARKER = "ZZ-SPY-MARKER-ZZ"
LEAKS = ("123456789", "987654321", "51.1234", "0.98765", MARKER)
"""What a leaked value would show: the coordinates' digit runs, at any precision, and the marker."""
_GOOD_CSV = "".join(f"2024-05-01T10:00:{s:02d}Z,51.5,-0.1\n" for s in range(5))


def _nmea(body: str) -> str:
    """``$body*hh``, with its checksum, so the sentence reaches the reader's field parsing."""
    return f"${body}*{functools.reduce(lambda a, c: a ^ ord(c), body, 0):02X}\n"


def _hostile_files(folder: Path) -> dict[str, bytes]:
    """Each hostile file, by name (the value in the place that is refused)."""
    jsonl_good = "".join(
        orjson.dumps({"ts": f"2024-05-01T10:00:{s % 60:02d}.{s:03d}Z", "topic": "gnss",
                      "values": {"lat_deg": 51.5, "lon_deg": -0.1}}).decode() + "\n"
        for s in range(210))  # more than the sniffer reads, so the bad line is the reader's
    session = synthesize(laps=1, imu_hz=10, gnss_hz=1, seed=5)
    fit = formats.write("fit", {"gnss": session.gnss})
    files = {
        "bad-cell.csv": "ts,lat_deg,lon_deg\n" + _GOOD_CSV
        + f"2024-05-01T10:00:09Z,51.123456789,-0.987654321{MARKER}\n",
        "ragged.csv": "ts,lat_deg,lon_deg\n" + _GOOD_CSV
        + f"2024-05-01T10:00:09Z,51.123456789,-0.987654321,{MARKER}\n",
        "far-time.csv": "time_ms,latitude,longitude\n1714557600000,51.5,-0.1\n"
        "51123456789e30,51.123456789,-0.987654321\n",
        "bad-time.jsonl": jsonl_good + orjson.dumps({
            "ts": f"51.123456789 {MARKER}", "topic": "gnss",
            "values": {"lat_deg": 51.123456789, "lon_deg": -0.987654321}}).decode() + "\n",
        "not-json.jsonl": jsonl_good
        + '{"ts": 1, "topic": "gnss", "values": {"lat_deg": 51.123456789, -0.987654321}}\n',
        "bad-fields.gpx": (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<gpx version="1.1" creator="x" xmlns="http://www.topografix.com/GPX/1/1"><trk>'
            "<trkseg>"
            '<trkpt lat="51.123456789x" lon="-0.987654321"><time>2024-05-01T10:00:00Z</time>'
            "</trkpt>"
            '<trkpt lon="-0.987654321"><time>2024-05-01T10:00:01Z</time></trkpt>'
            f'<trkpt lat="51.123456789" lon="-0.987654321"><time>{MARKER}</time></trkpt>'
            f'<trkpt lat="51.123456789" lon="-0.987654321"><ele>{MARKER}</ele>'
            "<time>2024-05-01T10:00:02Z</time></trkpt>"
            "</trkseg></trk></gpx>\n"
        ),
        "bad-fields.nmea": (
            _nmea("GPGGA,100000.00,5107.4074073x,N,00059.2592592,W,1,08,0.9,10.0,M,,M,,")
            + _nmea(f"GPRMC,100001.00,A,5107.4074073,N,00059.2592592,W,{MARKER},,010524,,,A")
            + _nmea("GPGGA,100002.00,9907.4074073,N,00059.2592592,W,1,08,0.9,51.123456789x,M,,M,,")
        ),
    }
    out = {name: text.encode() for name, text in files.items()}
    # A FIT file cut off after its first record is read up to the cut (its note names the
    # file and the byte, no value); one with a bad CRC is still refused.
    out["cut-off.fit"] = fit[: len(fit) // 2]
    out["bad-crc.fit"] = fit[:-1] + bytes([fit[-1] ^ 0xFF])
    for name, data in out.items():
        (folder / name).write_bytes(data)
    return out


async def _publish_bad_notice(settings: Settings) -> None:
    """A notice whose fields are refused (pydantic's own text would quote their inputs)."""
    nc = await nats.connect(settings.nats())
    try:
        await nc.jetstream().publish(
            Names(namespace=settings.namespace).sessions_subject("acme", "spy-2"),
            orjson.dumps({"objects": [f"{MARKER}.csv"], "priority": "51.123456789",
                          "date": "51.123456789", "title": MARKER * 40}),
        )
    finally:
        await nc.close()


async def test_hostile_files_and_notices_leave_no_value_in_errors_or_logs(
    settings: Settings, pool: Any, tmp_path: Path, captured: io.StringIO
) -> None:
    files = await asyncio.to_thread(_hostile_files, tmp_path)
    executors = SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    async with running_system(settings, executors):
        finals = {}
        for name in files:
            receipt = await upload_files(settings, tenant="acme", device="spy-1",
                                         paths=[tmp_path / name], config={})
            finals[name] = await wait_for_run(
                settings, tenant="acme", artifact_set_hash=receipt.artifact_set_hash,
                timeout_s=120)
        # A start/finish line off the globe, refused by intake before any run is made.
        line = tmp_path / "line.csv"
        line.write_text("ts,lat_deg,lon_deg\n" + _GOOD_CSV)
        await upload_files(settings, tenant="acme", device="spy-1",
                           paths=[line], config={"start_finish": {
                               "lat1": 91.123456789, "lon1": -0.987654321,
                               "lat2": 51.123456789, "lon2": -180.987654321}})
        await _publish_bad_notice(settings)
        dead = await wait_until(
            lambda: _at_least(list_session_dead_letters(settings, tenant="acme"), 2), within=30)
    assert {f.status for f in finals.values()} <= {"failed", "partial", "succeeded"}, finals
    assert finals["bad-cell.csv"].status == "failed"

    async with pool.acquire() as conn:
        attempts = await conn.fetch(
            "SELECT error_sub_type, error_message FROM job_attempts "
            "WHERE error_message IS NOT NULL")
        jobs = await conn.fetch(
            "SELECT last_error_message, skip_reason FROM jobs "
            "WHERE last_error_message IS NOT NULL OR skip_reason IS NOT NULL")
        runs = await conn.fetch(
            "SELECT failure_reason, feature_reasons FROM processing_runs")
    errors = [a["error_message"] for a in attempts]
    # Each refusal names the place and the kind of problem...
    assert "CSV cannot be parsed: line 7, column 'lon_deg': not a number" in errors
    assert "CSV cannot be parsed: line 7: expected 3 columns, found 4" in errors
    assert "CSV cannot be parsed: line 3, column 'time_ms': a time out of range" in errors
    assert ("line 211 is not a Tideway envelope: 'ts' is not an RFC 3339 time or a number of "
            "epoch milliseconds in range") in errors
    assert any(e.startswith("line 211 is not a Tideway envelope: not JSON (") for e in errors)
    assert any(e.startswith("FIT file is corrupt or cut off") for e in errors)
    assert finals["cut-off.fit"].status == "succeeded" and finals["bad-crc.fit"].status == "failed"
    assert finals["cut-off.fit"].notes[0].startswith("cut-off.fit is cut off at byte ")
    codes = {d.code: d.message for d in dead}
    assert codes["INVALID_CONFIG"].startswith("invalid run config: config.start_finish.lat1: ")
    assert codes["BAD_NOTICE"].startswith("invalid session notice: notice.priority: ")
    # ...and holds no value, wherever it is kept or written.
    texts = [
        *errors,
        *(str(dict(j)) for j in jobs),
        *(str(dict(r)) for r in runs),
        *(f"{d.code} {d.message}" for d in dead),  # d.notice is the notice itself, kept whole
        *(note for final in finals.values() for note in final.notes),
        *captured.getvalue().splitlines(),
    ]
    leaks = [(leak, text[:300]) for text in texts for leak in LEAKS if leak in text]
    assert not leaks, leaks[:5]


async def _at_least(found: Any, count: int) -> Any:
    items = await found
    return items if len(items) >= count else None
