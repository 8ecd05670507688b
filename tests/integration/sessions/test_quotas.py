"""Quotas and priority policy (issue 15 item 7, spec 000 §12): daily upload quotas refuse
cleanly (HTTP 429 / CLI exit 3, the quota named, nothing stored); an upload's default priority
is above reprocess and backfill; an API key cannot go above its tenant's maximum priority."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from typer.testing import CliRunner

from streams.cli.main import app
from streams.config import Settings
from streams.objects import ObjectStore
from streams.sessions import priorities
from streams.sessions.intake import provision_sessions
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_intake, wait_until
from tests.integration.sessions.test_api import _key, api_client


def _stored(settings: Settings) -> list[str]:
    return ObjectStore(settings.objects()).list("artifacts")


def _copies(nmea_file: Path, tmp_path: Path, n: int) -> list[Path]:
    """``n`` different files (one byte appended each), so each is its own artifact."""
    out = []
    for i in range(n):
        path = tmp_path / f"copy{i}.nmea"
        shutil.copy(nmea_file, path)
        with path.open("ab") as f:
            f.write(b"\n" * (i + 1))
        out.append(path)
    return out


async def test_cli_upload_over_the_daily_artifact_quota_exits_3_and_stores_nothing(
    cli_env: Settings, nmea_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEWAY_QUOTAS__DAILY_ARTIFACTS", "1")
    await provision_sessions(cli_env)
    first, second = _copies(nmea_file, tmp_path, 2)

    def upload(path: Path) -> Any:
        return CliRunner().invoke(app, ["sessions", "upload", str(path), "--device", "k1"])

    ok = await asyncio.to_thread(upload, first)
    assert ok.exit_code == 0, (ok.output, ok.exception)
    stored = _stored(cli_env)
    refused = await asyncio.to_thread(upload, second)
    assert refused.exit_code == 3, (refused.output, refused.exception)
    assert "quota daily_artifacts of tenant acme exceeded" in refused.output
    assert "QUOTA_EXCEEDED" in refused.output
    assert _stored(cli_env) == stored  # the refused file is not in the store


async def test_api_upload_over_the_tenants_byte_quota_is_429_and_stores_nothing(
    settings: Settings, pool: Any, nmea_file: Path, tmp_path: Path
) -> None:
    """The tenant's own column overrides the settings' default."""
    headers = await _key(pool, "acme")
    first, second = _copies(nmea_file, tmp_path, 2)
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE tenants SET daily_bytes_quota = $1 WHERE name = 'acme'",
            first.stat().st_size + 10,
        )

    async def post(client: Any, path: Path) -> Any:
        form = aiohttp.FormData()
        form.add_field("device", "kart-9")
        form.add_field(
            "file",
            await asyncio.to_thread(path.read_bytes),
            filename=path.name,
            content_type="text/plain",
        )
        return await client.post("/v1/sessions", data=form, headers=headers)

    async with running_intake(settings), api_client(settings, pool) as client:
        accepted = await post(client, first)
        assert accepted.status == 202, await accepted.text()
        stored = _stored(settings)
        refused = await post(client, second)
        body = await refused.json()
    assert refused.status == 429, body
    assert body["code"] == "QUOTA_EXCEEDED"
    assert "quota daily_bytes of tenant acme exceeded" in body["detail"]
    assert _stored(settings) == stored
    async with pool.acquire() as conn:
        used = await conn.fetchrow("SELECT artifacts, bytes FROM tenant_daily_usage")
    assert (used["artifacts"], used["bytes"]) == (1, first.stat().st_size)


async def test_priority_defaults_and_the_tenants_ceiling(
    settings: Settings, pool: Any, nmea_file: Path, tmp_path: Path
) -> None:
    headers = await _key(pool, "acme")
    plain, urgent, allowed = _copies(nmea_file, tmp_path, 3)

    async def post(client: Any, path: Path, priority: int | None = None) -> Any:
        form = aiohttp.FormData()
        form.add_field("device", "kart-9")
        if priority is not None:
            form.add_field("priority", str(priority))
        form.add_field(
            "file",
            await asyncio.to_thread(path.read_bytes),
            filename=path.name,
            content_type="text/plain",
        )
        return await client.post("/v1/sessions", data=form, headers=headers)

    async with running_intake(settings), api_client(settings, pool) as client:
        default = await (await post(client, plain)).json()
        too_high = await post(client, urgent, priority=500)
        refusal = await too_high.json()
        async with pool.acquire() as conn:
            await conn.execute("UPDATE tenants SET max_priority = 600 WHERE name = 'acme'")
        raised = await (await post(client, allowed, priority=500)).json()
    assert too_high.status == 400, refusal
    assert refusal["code"] == "PRIORITY_TOO_HIGH"
    async with pool.acquire() as conn:
        runs = dict(await conn.fetch("SELECT id::text, priority FROM processing_runs"))
    assert runs[default["run_id"]] == priorities.UPLOAD
    assert runs[raised["run_id"]] == 500
    assert len(runs) == 2  # the refused upload made no run
    assert priorities.UPLOAD > priorities.DEVICE > priorities.REPROCESS > priorities.BACKFILL


async def test_runs_beyond_the_tenants_active_run_limit_wait(
    settings: Settings, pool: Any, nmea_file: Path, tmp_path: Path
) -> None:
    """Three uploads of one tenant, a limit of two active runs: one claim starts two runs;
    the third stays pending (recorded, not refused) with its jobs queued."""
    from streams.jobs import queue

    async with running_intake(settings):
        for path in _copies(nmea_file, tmp_path, 3):
            await upload_files(settings, tenant="acme", device="k1", paths=[path])

        async def three() -> bool:
            async with pool.acquire() as conn:
                return await conn.fetchval("SELECT count(*) FROM processing_runs") == 3

        await wait_until(three, within=30)
    async with pool.acquire() as conn:
        claimed = await queue.claim(
            conn,
            worker_id="w",
            limit=10,
            tenant_max_running=10,
            heavy_max_running=2,
            max_active_runs=2,
        )
        statuses = sorted(
            r["status"] for r in await conn.fetch("SELECT status FROM processing_runs")
        )
    assert len({job.run_id for job in claimed}) == 2
    assert statuses == ["pending", "running", "running"]
