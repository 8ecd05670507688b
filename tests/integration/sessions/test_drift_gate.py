"""The drift gate (issue 31, spec 003): a reprocess whose key figures move beyond the limits
ends succeeded but not active, with ``DRIFT_EXCEEDED`` and the diff recorded, until an operator
promotes it; one within the limits publishes as ever; a backfill reports how many sessions each
outcome hit. Real Postgres, NATS, object store and ClickHouse; the DAG runs for real."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from typer.testing import CliRunner

from streams.adapters import postgres
from streams.cli.main import app
from streams.config import Settings
from tests.integration.api.conftest import key_headers
from tests.integration.sessions.conftest import running_system
from tests.integration.sessions.test_api import api_client


async def _cli(*args: str) -> Any:
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


async def _upload(path: Path, device: str, config: dict[str, Any]) -> dict[str, Any]:
    return dict(orjson.loads(await _cli(
        "sessions", "upload", str(path), "--device", device, "--config",
        orjson.dumps(config).decode(), "--wait", "--json")))


async def _synth(tmp_path: Path, seed: int, laps: int = 3) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / f"s{seed}.csv"
    await _cli("sessions", "synth", "--laps", str(laps), "--imu-hz", "20", "--seed", str(seed),
               "--format", "csv", "--out", str(out))
    truth = orjson.loads((tmp_path / f"s{seed}.csv.truth.json").read_bytes())
    return out, {"start_finish": truth["start_finish"]}


async def _reprocess(session: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    args = ["sessions", "reprocess", session, "--wait", "--json"]
    if config is not None:
        args[3:3] = ["--config", orjson.dumps(config).decode()]
    return dict(orjson.loads(await _cli(*args)))


async def test_a_lap_count_change_is_held_back_until_promoted(cli_env: Settings,
                                                              tmp_path: Path) -> None:
    path, config = await _synth(tmp_path, seed=4)
    async with running_system(cli_env):
        first = await _upload(path, "kart-1", config)
        assert first["status"] in {"succeeded", "partial"}, first
        session = first["session_id"]
        # The same algorithms and config: every figure within the limits, published.
        same = await _reprocess(session)
        # A change that moves the lap count (laps shorter than 1,000 s are no laps now).
        moved = await _reprocess(session, {**config, "laps": {"min_lap_s": 1000}})
    conn = await asyncpg.connect(cli_env.postgres())
    try:
        runs = {r["id"]: r for r in await conn.fetch(
            "SELECT id::text, status, summary FROM processing_runs")}
        active = await conn.fetchval("SELECT active_run_id::text FROM sessions")
    finally:
        await conn.close()

    def drift(run_id: str) -> dict[str, Any]:
        summary = runs[run_id]["summary"]
        return dict((orjson.loads(summary) if isinstance(summary, str) else summary)["drift"])

    assert drift(same["run_id"])["exceeded"] is False
    held = drift(moved["run_id"])
    assert runs[moved["run_id"]]["status"] == "succeeded"  # ended well, only not published
    assert held["exceeded"] is True and held["reason"] == "DRIFT_EXCEEDED"
    assert held["against_run"] == same["run_id"]
    laps = next(c for c in held["checks"] if c["figure"] == "laps")
    assert (laps["before"], laps["after"], laps["exceeded"]) == (3, 0, True)
    assert next(c for c in held["checks"] if c["figure"] == "feature.laps")["exceeded"]
    assert active == same["run_id"]  # the pointer stayed on the run within the limits

    shown = await _cli("runs", "show", moved["run_id"])
    assert "drift gate: HELD BACK (DRIFT_EXCEEDED)" in shown and "laps: 3 -> 0" in shown

    # The API shows it; promoting it (after its datasets verify) makes it active.
    pool = await postgres.create_pool(cli_env.postgres(), postgres.PoolShape(max_size=4))
    try:
        headers = await key_headers(pool, "acme")
        async with api_client(cli_env, pool) as client:
            run = await (await client.get(f"/v1/runs/{moved['run_id']}", headers=headers)).json()
            assert run["active"] is False and run["summary"]["drift"]["exceeded"] is True
            resp = await client.post(f"/v1/runs/{moved['run_id']}/promote", headers=headers)
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["to_run"] == moved["run_id"]
            run = await (await client.get(f"/v1/runs/{moved['run_id']}", headers=headers)).json()
            assert run["active"] is True
    finally:
        await pool.close()
    # And back by hand, from the command line.
    back = orjson.loads(await _cli("runs", "promote", same["run_id"], "--json"))
    assert back["to_run"] == same["run_id"] and back["from_run"] == moved["run_id"]


async def test_a_backfill_reports_each_outcome(cli_env: Settings, tmp_path: Path) -> None:
    """20 sessions; the active runs of 8 of them are made to disagree with what today's code
    computes (their recorded lap count), so a backfill publishes 12 and holds back 8."""
    paths = [await _synth(tmp_path, seed=10 + i, laps=1) for i in range(20)]
    async with running_system(cli_env):
        for i, (path, config) in enumerate(paths):
            done = await _upload(path, f"kart-{i}", config)
            assert done["status"] in {"succeeded", "partial"}, done
    conn = await asyncpg.connect(cli_env.postgres())
    try:
        await conn.execute("UPDATE processing_runs SET pipeline_version = 'older'")
        await conn.execute(
            "UPDATE processing_runs SET summary = jsonb_set(summary, '{laps,count}', '7') "
            "WHERE id IN (SELECT active_run_id FROM sessions ORDER BY created_at LIMIT 8)")
    finally:
        await conn.close()
    async with running_system(cli_env):
        text = " ".join((await _cli("runs", "backfill", "--tenant", "acme", "--wait")).split())
    assert "20 started" in text, text
    assert "8 held back by the drift gate (DRIFT_EXCEEDED)" in text, text
    assert "12 succeeded" in text or "12 partial" in text, text
