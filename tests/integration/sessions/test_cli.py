"""``tideway sessions ...`` and ``tideway api-keys ...`` end to end (CLI in-process)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from typer.testing import CliRunner

from streams.cli.main import app
from streams.config import Settings
from tests.integration.sessions.conftest import running_system


async def _cli(*args: str) -> Any:
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


async def test_synth_upload_wait_reprocess_rollback(cli_env: Settings, tmp_path: Path) -> None:
    out = tmp_path / "demo.csv.gz"
    await _cli(
        "sessions",
        "synth",
        "--laps",
        "2",
        "--imu-hz",
        "50",
        "--format",
        "csv",
        "--out",
        str(out),
        "--seed",
        "2",
    )
    truth = orjson.loads((tmp_path / "demo.csv.gz.truth.json").read_bytes())
    assert truth["lap_count"] == 2 and out.read_bytes()[:2] == b"\x1f\x8b"  # gzip

    line = orjson.dumps({"start_finish": truth["start_finish"]}).decode()
    async with running_system(cli_env):
        done = orjson.loads(
            await _cli(
                "sessions",
                "upload",
                str(out),
                "--device",
                "kart-3",
                "--config",
                line,
                "--wait",
                "--json",
            )
        )
        assert done["status"] in {"succeeded", "partial"}
        assert done["features_available"]["fusion"] is True
        listed = orjson.loads(await _cli("sessions", "list", "--json"))
        assert len(listed) == 1 and listed[0]["active_run_id"] == done["run_id"]
        session = listed[0]["id"]
        assert done["session_id"] == session  # --wait --json names the session it made
        # The same file for another device is kart-3's session, and the answer says so.
        same = await asyncio.to_thread(CliRunner().invoke, app, [
            "sessions", "upload", str(out), "--device", "kart-4", "--json"])
        assert same.exit_code == 0, (same.output, same.exception)
        assert orjson.loads(same.stdout)["session_id"] == session
        assert orjson.loads(same.stdout)["existing_session_device"] == "kart-3"
        assert "uploaded before for device kart-3" in same.stderr
        again = orjson.loads(await _cli("sessions", "reprocess", session, "--wait", "--json"))
        assert again["status"] in {"succeeded", "partial"} and again["run_id"] != done["run_id"]

    shown = orjson.loads(await _cli("sessions", "show", session, "--json"))
    assert shown["active_run_id"] == again["run_id"] and len(shown["runs"]) == 2
    assert shown["active_run"]["summary"]["laps"]["count"] == 2
    back = orjson.loads(await _cli("sessions", "rollback", session, "--json"))
    assert (back["from_run"], back["to_run"]) == (again["run_id"], done["run_id"])
    key = orjson.loads(await _cli("api-keys", "create", "ci", "--json"))
    assert key["tenant"] == "acme" and key["key"].startswith("tw_")
    # The id `revoke` takes is in create's own answer and in `list`, never the secret.
    shown_key = await _cli("api-keys", "create", "ops")
    ops_id = shown_key.split()[2]
    first = orjson.loads(await _cli("api-keys", "list", "--json"))[0]
    assert {k: first[k] for k in ("id", "name", "tenant", "prefix", "revoked_at")} == {
        "id": key["id"], "name": "ci", "tenant": "acme", "prefix": key["key"][3:11],
        "revoked_at": None}
    await _cli("api-keys", "revoke", ops_id)
    keys = orjson.loads(await _cli("api-keys", "list", "--json"))
    assert [(k["id"], k["name"], k["revoked_at"] is None) for k in keys] == [
        (key["id"], "ci", True), (ops_id, "ops", False)]
    assert key["key"] not in await _cli("api-keys", "list")


async def test_upload_wait_exits_3_when_the_run_fails(cli_env: Settings, tmp_path: Path) -> None:
    """A run that ends ``failed`` is exit code 3 (``ExitCode.FAILED``), never click's usage 2."""
    junk = tmp_path / "not-a-session.log"
    junk.write_bytes(b"this is not a session file in any format Tideway reads\n" * 50)
    async with running_system(cli_env):
        result = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["sessions", "upload", str(junk), "--device", "kart-9", "--wait", "--json"],
        )
    assert result.exit_code == 3, (result.output, result.exception)
    assert orjson.loads(result.output)["status"] == "failed"


async def test_runs_backfill_dry_run_then_wait_then_nothing_left(
    cli_env: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "s.csv"
    await _cli("sessions", "synth", "--laps", "1", "--imu-hz", "20", "--out", str(out))
    async with running_system(cli_env):
        done = orjson.loads(
            await _cli("sessions", "upload", str(out), "--device", "k1", "--wait", "--json")
        )
    assert done["status"] in {"succeeded", "partial"}
    conn = await asyncpg.connect(cli_env.postgres())
    try:  # the run was made by an older pipeline
        await conn.execute("UPDATE processing_runs SET pipeline_version = 'older'")
    finally:
        await conn.close()

    dry = orjson.loads(await _cli("runs", "backfill", "--tenant", "acme", "--dry-run", "--json"))
    assert [d["action"] for d in dry] == ["would_start"]
    async with running_system(cli_env):
        text = await _cli("runs", "backfill", "--tenant", "acme", "--wait")
    assert "1 started" in text and "runs ended: 1 " in text, text
    again = orjson.loads(await _cli("runs", "backfill", "--json"))
    assert [d["action"] for d in again] == ["current"]
    assert again[0]["status"] in {"succeeded", "partial"}
    shown = await _cli("runs", "show", again[0]["run_id"])
    assert "verification: ok (" in shown, shown
