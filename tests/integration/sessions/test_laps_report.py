"""Issue 18 item 5 through the CLI and the API, as a user would: synthetic NMEA logs with
ground truth, some RMC sentences lost, and the per-lap rows and line a user uploads them for;
an open road whose features read the same in ``runs show`` and ``sessions show``."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from stages.batch.synth import synthesize
from streams.api.keys import create_api_key
from streams.cli.main import app
from streams.config import Settings
from tests.integration.sessions.conftest import running_system
from tests.integration.sessions.test_api import api_client

LAPS, SEED = 3, 5


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", settings.postgres())
    monkeypatch.setenv("TIDEWAY_NATS_URL", settings.nats())
    monkeypatch.setenv("TIDEWAY_NAMESPACE", settings.namespace)
    monkeypatch.setenv("TIDEWAY_OBJECT_STORE", settings.objects())
    monkeypatch.setenv("TIDEWAY_DEFAULT_TENANT", "acme")
    return settings


async def _cli(*args: str) -> Any:
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def _lose_rmc(path: Path, every: int) -> int:
    """Break the checksum of every ``every``-th RMC sentence (the reader drops those lines)."""
    lines = path.read_bytes().split(b"\n")
    lost = 0
    for i, line in enumerate(lines):
        if line[3:6] == b"RMC" and i % every == 0:
            lines[i] = line[:-2] + (b"00" if line[-2:] != b"00" else b"11")
            lost += 1
    path.write_bytes(b"\n".join(lines))
    return lost


async def test_lost_rmc_session_laps_through_cli_and_api(
    cli_env: Settings, pool: Any, tmp_path: Path
) -> None:
    out = tmp_path / "track.nmea"
    await _cli("sessions", "synth", "--laps", str(LAPS), "--format", "nmea",
               "--seed", str(SEED), "--out", str(out))  # fmt: skip
    assert _lose_rmc(out, every=37) > 50
    truth = orjson.loads((tmp_path / "track.nmea.truth.json").read_bytes())
    session = synthesize(laps=LAPS, seed=SEED)  # the same session, for its true speeds
    t, e, n = session.truth.imu_t, session.truth.imu_e, session.truth.imu_n
    true_top = float((np.hypot(np.diff(e), np.diff(n)) / np.diff(t)).max())

    config = orjson.dumps({"start_finish": truth["start_finish"]}).decode()
    async with running_system(cli_env), api_client(cli_env, pool) as client:
        done = orjson.loads(await _cli("sessions", "upload", str(out), "--device", "kart-5",
                                       "--config", config, "--wait", "--json"))  # fmt: skip
        assert done["status"] in {"succeeded", "partial"}
        listed = orjson.loads(await _cli("sessions", "list", "--json"))
        sid = listed[0]["id"]
        shown = orjson.loads(await _cli("sessions", "show", sid, "--laps", "--json"))
        async with pool.acquire() as conn:
            key = await create_api_key(conn, tenant="acme", name="laps")
            other = await create_api_key(conn, tenant="globex", name="laps")
        resp = await client.get(
            f"/v1/sessions/{sid}/laps", headers={"Authorization": f"Bearer {key.secret}"}
        )
        assert resp.status == 200, await resp.text()
        api = await resp.json()
        hidden = await client.get(
            f"/v1/sessions/{sid}/laps", headers={"Authorization": f"Bearer {other.secret}"}
        )
        assert hidden.status == 404

    report = shown["laps"]
    assert report["run_id"] == done["run_id"] and report["reason"] is None
    line = report["line"]
    assert line["source"] == "config"
    assert all(
        line[k] == pytest.approx(truth["start_finish"][k], abs=1e-9)
        for k in ("lat1", "lon1", "lat2", "lon2")
    )
    rows = report["laps"]
    assert [r["lap"] for r in rows] == list(range(1, LAPS + 1))
    for row, lap in zip(rows, truth["laps"], strict=True):
        assert abs(row["lap_time_s"] - lap["lap_time_s"]) <= 0.05
        # One lap distance: speed over the lap, not the path through noisy fixes (+30 %).
        assert row["distance_m"] == pytest.approx(lap["distance_m"], rel=3e-3)
        # A lost RMC's speed is the receiver's, interpolated - not two fixes differenced.
        assert row["max_speed_mps"] <= true_top + 0.6
    assert max(r["max_speed_mps"] for r in rows) >= true_top - 0.6
    assert sum(r["is_best"] for r in rows) == 1
    # The API answers with the same report (its times in RFC 3339's Z form, the CLI's +00:00).
    assert _instants(api) == _instants(report)
    text = await _cli("sessions", "show", sid, "--laps")
    assert "start/finish line" in text and "config" in text
    assert f"{rows[0]['lap_time_s']:.3f} ±{rows[0]['lap_time_sigma_s']:.3f}" in text
    assert "best" in text
    # Sectors: the table, one best mark per sector, and the theoretical best under it.
    assert "sectors (* best)" in text
    assert text.count("*") - 1 == len(report["sector_lines"]) + 1  # "(* best)" + one per sector
    assert f"theoretical best {report['theoretical_best_s']:.3f} s" in text
    for row in rows:
        assert sum(x["time_s"] for x in row["sectors"]) == pytest.approx(row["lap_time_s"])
    # One lap against the reference lap.
    ref = report["reference_lap"]
    other = next(r for r in rows if r["lap"] != ref)
    lap = orjson.loads(await _cli("sessions", "lap", sid, str(other["lap"]), "--json"))
    ref_time = next(r["lap_time_s"] for r in rows if r["lap"] == ref)
    assert lap["reference_lap"] == ref and lap["corners"]
    assert lap["delta"][-1]["delta_s"] == pytest.approx(other["lap_time_s"] - ref_time, abs=1e-4)
    text = await _cli("sessions", "lap", sid, str(other["lap"]))
    assert "corners (vs ref: + lost, - gained)" in text and "mini-sectors" in text
    assert f"{other['lap_time_s'] - ref_time:+.3f}" in text


async def test_open_road_features_read_the_same_in_runs_show_and_sessions_show(
    cli_env: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "road.nmea"
    await _cli("sessions", "synth", "--laps", "2", "--open-road", "--format", "nmea",
               "--seed", "4", "--out", str(out))  # fmt: skip
    async with running_system(cli_env):
        done = orjson.loads(await _cli("sessions", "upload", str(out), "--device", "car-1",
                                       "--wait", "--json"))  # fmt: skip
    assert done["status"] in {"succeeded", "partial"}
    run = orjson.loads(await _cli("runs", "show", done["run_id"], "--json"))
    sid = run["run"]["session_id"]
    shown = orjson.loads(await _cli("sessions", "show", sid, "--laps", "--json"))
    active = shown["active_run"]
    for flags, reasons in (
        (done["features_available"], done["feature_reasons"]),
        (run["features_available"], run["feature_reasons"]),
        (active["features_available"], active["feature_reasons"]),
    ):
        assert flags["laps"] is False and reasons["laps"] == "TRACK_NOT_CLOSED"
        assert flags["lap_compare"] is False
    assert run["features_available"] == active["features_available"]
    assert run["feature_reasons"] == active["feature_reasons"]
    assert shown["laps"]["laps"] == [] and shown["laps"]["reason"] == "TRACK_NOT_CLOSED"


def _instants(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with each lap's start and end parsed, so one instant compares equal however
    it is written."""
    laps = [
        {**lap, "start": dt.datetime.fromisoformat(lap["start"]),
         "end": dt.datetime.fromisoformat(lap["end"])}
        for lap in report["laps"]
    ]  # fmt: skip
    return {**report, "laps": laps}
