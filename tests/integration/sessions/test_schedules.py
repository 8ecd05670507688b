"""Scheduled backfills (issue 31, spec 003's cron trigger) on a real Postgres: a due schedule is
run once per tick whoever asks, starts runs only for sessions not at the current versions, keeps
its outcome and next time; the worker process runs them; the CLI and the API show them."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.config import Settings
from streams.errors import NotFoundError, UsageError
from streams.sessions.progress import wait_for_run
from streams.sessions.schedules import add_schedule, list_schedules, next_time, run_due
from streams.sessions.upload import upload_files
from tests.integration.api.conftest import key_headers
from tests.integration.sessions.conftest import running_system
from tests.integration.sessions.test_api import api_client

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


async def _session(settings: Settings, tenant: str, nmea_file: Path) -> Any:
    async with running_system(settings):
        receipt = await upload_files(settings, tenant=tenant, device="d1", paths=[nmea_file])
        done = await wait_for_run(settings, tenant=tenant,
                                  artifact_set_hash=receipt.artifact_set_hash, timeout_s=60)
    assert done.status in {"succeeded", "partial"}, done
    return receipt.session_id


async def _runs(pool: Any, session_id: Any) -> list[Any]:
    async with pool.acquire() as conn:
        return list(await conn.fetch(
            "SELECT requested_by, priority FROM processing_runs WHERE session_id = $1 "
            "ORDER BY created_at", session_id))


def test_cron_expressions() -> None:
    assert next_time("0 3 * * *", T0) == datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
    assert next_time("@hourly", T0) == T0 + timedelta(hours=1)
    with pytest.raises(UsageError, match="not a cron expression"):
        next_time("every night", T0)


async def test_a_schedule_runs_once_per_tick(settings: Settings, pool: Any,
                                             nmea_file: Path) -> None:
    session = await _session(settings, "acme", nmea_file)
    async with pool.acquire() as conn:
        with pytest.raises(NotFoundError):
            await add_schedule(conn, tenant="nobody", name="x", cron="@daily", now=T0)
        with pytest.raises(UsageError):
            await add_schedule(conn, tenant="acme", name="x", cron="nightly", now=T0)
        saved = await add_schedule(conn, tenant="acme", name="nightly", cron="0 3 * * *",
                                   uploaded_within_s=7 * 86400, now=T0)
        assert saved.next_run_at == datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
        assert saved.last_run_at is None

        # Not due yet: nothing runs.
        assert await run_due(conn, settings, now=T0) == []
        # Due, with the session's run at the current versions: the tick starts nothing.
        tick_at = saved.next_run_at + timedelta(seconds=5)
        (tick,) = await run_due(conn, settings, now=tick_at)
        assert tick.outcome == {"current": 1} and tick.error is None
        assert tick.next_run_at == datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
        assert await run_due(conn, settings, now=tick_at) == []  # once per tick

        # The code changed since (the run pins an older parser): the next tick starts one run,
        # and a tick after that starts none (once per version).
        await conn.execute("UPDATE processing_runs SET parser_version = 'older'")
        (tick,) = await run_due(conn, settings, now=tick.next_run_at)
        assert tick.outcome == {"started": 1}
        runs = await _runs(pool, session)
        assert len(runs) == 2 and runs[1]["requested_by"] == "backfill:schedule nightly"
        assert runs[1]["priority"] < 0
        (tick,) = await run_due(conn, settings, now=tick.next_run_at)
        assert tick.outcome == {"current": 1}
        assert len(await _runs(pool, session)) == 2

        # Only sessions uploaded within a day of the tick: this one (uploaded today) is too
        # old at a tick a week on.
        await add_schedule(conn, tenant="acme", name="nightly", cron="0 3 * * *",
                           uploaded_within_s=86400, now=T0 + timedelta(days=30))
        await conn.execute("UPDATE backfill_schedules SET next_run_at = $1",
                           datetime.now(UTC) + timedelta(days=8))
        (tick,) = await run_due(conn, settings, now=datetime.now(UTC) + timedelta(days=8))
        assert tick.outcome == {}

    # Two workers at the same due tick: exactly one runs it.
    async with pool.acquire() as conn:
        await conn.execute("UPDATE backfill_schedules SET next_run_at = $1", T0)
    async with pool.acquire() as c1, pool.acquire() as c2:
        both = await asyncio.gather(run_due(c1, settings, now=T0 + timedelta(seconds=1)),
                                    run_due(c2, settings, now=T0 + timedelta(seconds=1)))
    assert sorted(len(t) for t in both) == [0, 1]
    async with pool.acquire() as conn:
        (shown,) = await list_schedules(conn, "acme")
        assert await list_schedules(conn, "globex") == []
    assert shown.last_run_at == T0 + timedelta(seconds=1)


async def test_the_worker_runs_due_schedules(settings: Settings, pool: Any) -> None:
    """``tideway worker`` (processes.worker, as deployed) runs a due schedule by itself."""
    from streams.processes import worker

    fast = settings.model_copy(update={
        "schedules": settings.schedules.model_copy(update={"poll_s": 0.2})})
    async with pool.acquire() as conn:
        await conn.execute("INSERT INTO tenants (name) VALUES ('acme') ON CONFLICT DO NOTHING")
        await add_schedule(conn, tenant="acme", name="often", cron="* * * * *")
        await conn.execute("UPDATE backfill_schedules SET next_run_at = now() - interval '1s'")
    stop = asyncio.Event()
    task = asyncio.create_task(worker(fast, stop, None, executors="sessions"))
    try:
        for _ in range(150):
            async with pool.acquire() as conn:
                (s,) = await list_schedules(conn, "acme")
            if s.last_run_at is not None:
                break
            await asyncio.sleep(0.1)
        assert s.last_run_at is not None, "the worker never ran the due schedule"
        assert s.last_outcome == {} and s.last_error is None  # no sessions yet
        assert s.next_run_at > s.last_run_at
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)


async def test_cli_and_api_show_schedules(settings: Settings, pool: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.cli.main import app

    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", settings.postgres())
    monkeypatch.setenv("TIDEWAY_DEFAULT_TENANT", "acme")
    async with pool.acquire() as conn:
        await conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex') "
                           "ON CONFLICT DO NOTHING")

    async def cli(*args: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, app, list(args))

    added = await cli("runs", "schedule", "add", "nightly", "--cron", "0 3 * * *",
                      "--uploaded-within", "7d", "--device", "d1")
    assert added.exit_code == 0, added.output
    assert "scheduled backfill nightly of acme: 0 3 * * * (UTC)" in added.output
    bad = await cli("runs", "schedule", "add", "x", "--cron", "soon")
    # (the command's error: `main()` prints it with its code; the runner keeps the exception)
    assert bad.exit_code != 0 and "not a cron expression" in f"{bad.output}{bad.exception}"
    listed = await cli("runs", "schedule", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert '"uploaded_within": "7d"' in listed.output and '"device": "d1"' in listed.output
    runs = await cli("runs", "list")
    assert "scheduled backfill nightly: 0 3 * * * (UTC), next at" in runs.output

    acme, globex = await key_headers(pool, "acme"), await key_headers(pool, "globex")
    async with api_client(settings, pool) as client:
        mine = await (await client.get("/v1/backfill-schedules", headers=acme)).json()
        theirs = await (await client.get("/v1/backfill-schedules", headers=globex)).json()
    assert [s["name"] for s in mine["items"]] == ["nightly"]
    assert mine["items"][0]["uploaded_within_s"] == 7 * 86400
    assert theirs["items"] == []

    removed = await cli("runs", "schedule", "remove", "nightly")
    assert removed.exit_code == 0, removed.output
    gone = await cli("runs", "schedule", "remove", "nightly")
    assert gone.exit_code != 0
