"""Saved tracks on a real Postgres (#32 item 5): saved from a session's timed line through the
CLI, stamped into every run created afterwards (upload, reprocess, backfill) and resolved from
that run's config on a later session; a config that names its own ``tracks`` keeps them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schemas.run_config import StartFinish, TrackConfig, parse_run_config
from stages.batch import formats
from stages.batch.geo import GnssFixes, LocalFrame
from stages.batch.synth import SyntheticSession, synthesize
from stages.batch.track_library import resolve
from streams.config import Settings
from streams.errors import NotFoundError
from streams.sessions.progress import wait_for_run
from streams.sessions.reprocess import BackfillScope, backfill, reprocess
from streams.sessions.saved_tracks import add_track, list_tracks, remove_track, session_lines
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_system

_LINE = StartFinish(lat1=47.0, lon1=8.0, lat2=47.0002, lon2=8.0)


async def _upload(settings: Settings, tenant: str, path: Path) -> tuple[Any, Any]:
    receipt = await upload_files(settings, tenant=tenant, device="car", paths=[path])
    done = await wait_for_run(settings, tenant=tenant,
                              artifact_set_hash=receipt.artifact_set_hash, timeout_s=90)
    assert done.status in {"succeeded", "partial"}, done
    return receipt.session_id, done.run_id


def _csv(tmp_path: Path, name: str, s: SyntheticSession) -> Path:
    path = tmp_path / name
    path.write_bytes(formats.write("csv", {"gnss": s.gnss, "imu": s.imu}, compressed=False))
    return path


async def _config(pool: Any, run_id: Any) -> dict[str, Any]:
    async with pool.acquire() as conn:
        return dict(await conn.fetchval(
            "SELECT config FROM processing_runs WHERE id = $1", run_id))


async def test_a_track_saved_from_a_session_reaches_later_sessions(
        settings: Settings, pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.cli.main import app

    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", settings.postgres())
    monkeypatch.setenv("TIDEWAY_DEFAULT_TENANT", "acme")

    async def cli(*args: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, app, list(args))

    first = synthesize(laps=2, seed=4, imu_hz=50.0)
    later = synthesize(laps=2, seed=4, imu_hz=50.0, gnss_noise_m=2.5)  # the same track
    async with running_system(settings):
        session, run = await _upload(settings, "acme", _csv(tmp_path, "first.csv", first))
        assert "tracks" not in await _config(pool, run)  # acme had no saved track yet

        saved = await cli("tracks", "add", "Home circuit", "--from-session", str(session))
        assert saved.exit_code == 0, (saved.output, saved.exception)
        # The lines the run was timed on: its found start/finish and its two sector lines.
        assert "saved track Home circuit of acme (circuit, 2 sector lines)" in saved.output
        listed = await cli("tracks", "list", "--json")
        assert '"name": "Home circuit"' in listed.output and '"source": "saved"' in listed.output
        shown = await cli("tracks", "show", "home circuit")  # names are exact
        assert shown.exit_code != 0
        shown = await cli("tracks", "show", "Home circuit")
        assert shown.exit_code == 0 and "start_finish" in shown.output

        _, run2 = await _upload(settings, "acme", _csv(tmp_path, "later.csv", later))
    config = await _config(pool, run2)
    (stamped,) = config["tracks"]
    assert stamped["name"] == "Home circuit"
    # The later session is timed on it: resolve (as detect_laps calls it) finds it in the
    # run's own config from the session's positions.
    fixes = GnssFixes.from_table(later.gnss)
    e, n = LocalFrame.around(fixes.lat, fixes.lon).to_en(fixes.lat, fixes.lon)
    found = resolve(parse_run_config(config), fixes.lat, fixes.lon, fixes.ground_speed(e, n))
    assert found is not None and (found.name, found.source) == ("Home circuit", "saved")
    async with pool.acquire() as conn:
        line = await session_lines(conn, "acme", session, "x")
    assert found.start_finish == line.start_finish
    assert len(found.sectors) == 2 and found.sectors == tuple(line.sectors)

    # The library is listed too, with its source named; a bad line is refused with its option.
    lib = await cli("tracks", "list", "--library", "--json")
    assert '"name": "Silverstone Circuit"' in lib.output and "bacinger/f1-circuits" in lib.output
    bad = await cli("tracks", "add", "x", "--start-finish", "91,0,0,0")
    assert bad.exit_code != 0 and "--start-finish" in f"{bad.output}{bad.exception}"
    removed = await cli("tracks", "remove", "Home circuit")
    assert removed.exit_code == 0, removed.output
    assert (await cli("tracks", "remove", "Home circuit")).exit_code != 0


async def test_every_new_run_is_stamped_with_the_tenants_tracks(
        settings: Settings, pool: Any, nmea_file: Path) -> None:
    async with running_system(settings):
        async with pool.acquire() as conn:
            await conn.execute("INSERT INTO tenants (name) VALUES ('acme'), ('globex') "
                               "ON CONFLICT DO NOTHING")
            await add_track(conn, tenant="acme", track=TrackConfig(name="A", start_finish=_LINE))
        session, run = await _upload(settings, "acme", nmea_file)
        g_session, g_run = await _upload(settings, "globex", nmea_file)
    assert [t["name"] for t in (await _config(pool, run))["tracks"]] == ["A"]
    assert "tracks" not in await _config(pool, g_run)  # globex has none: no key at all

    async with pool.acquire() as conn:
        await add_track(conn, tenant="acme", track=TrackConfig(
            name="B", start_finish=_LINE, finish=_LINE, sectors=[_LINE]))
        assert [t.name for t in await list_tracks(conn, "acme")] == ["A", "B"]
        assert await list_tracks(conn, "globex") == []
        # A reprocess of the run's own config keeps the tracks it was stamped with ...
        kept = await reprocess(conn, tenant="acme", session_id=session)
        # ... one given a config without `tracks` gets the tenant's current ones ...
        fresh = await reprocess(conn, tenant="acme", session_id=session, config={})
        # ... and one that names its own keeps those.
        own = await reprocess(conn, tenant="acme", session_id=session, config={"tracks": []})
        # A backfill (as a scheduled one runs) of globex, which now has a track too.
        await add_track(conn, tenant="globex", track=TrackConfig(name="G", start_finish=_LINE))
        await conn.execute("UPDATE processing_runs SET parser_version = 'older' "
                           "WHERE session_id = $1", g_session)
        (item,) = await backfill(conn, BackfillScope(tenant="globex"))
        assert item.action == "started"
        with pytest.raises(NotFoundError):
            await remove_track(conn, "globex", "A")  # acme's, not globex's
    assert [t["name"] for t in (await _config(pool, kept.run_id))["tracks"]] == ["A"]
    b = (await _config(pool, fresh.run_id))["tracks"][1]
    assert b == {"name": "B", "start_finish": _LINE.model_dump(),
                 "finish": _LINE.model_dump(), "sectors": [_LINE.model_dump()]}
    assert (await _config(pool, own.run_id))["tracks"] == []
    assert [t["name"] for t in (await _config(pool, item.run_id))["tracks"]] == ["G"]
