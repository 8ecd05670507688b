"""No upload is lost in a Postgres outage; what can never succeed is dead-lettered, listed,
shown and redriven (issue 15 items 1 and 10).

The tests run their own throwaway Postgres (the ``pgserver`` wheel's bundled server on a unix
socket in a private directory) and stop it with ``pg_ctl stop -m fast`` for longer than the
old delivery budget (20 deliveries), with nak delays of a few tens of milliseconds so that
takes a second, not minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest
from typer.testing import CliRunner

from streams import migrate
from streams.adapters import postgres
from streams.cli.main import app
from streams.config import Settings
from streams.names import Names
from streams.objects import ObjectStore
from streams.sessions.intake import provision_sessions, run_intake
from streams.sessions.notice import NoticeArtifact, SessionNotice
from streams.sessions.upload import store_file, upload_files
from tests.integration.sessions.conftest import wait_until

pgserver = pytest.importorskip("pgserver")
from pgserver._commands import pg_ctl  # noqa: E402 (after the skip)

OLD_BUDGET = 20  # deliveries after which intake used to give a notice up


@pytest.fixture
async def private_pg() -> AsyncIterator[tuple[Any, str]]:
    """A throwaway Postgres with a migrated ``tideway`` database."""
    data = Path(tempfile.mkdtemp(prefix="tw-intake-outage-"))
    server = await asyncio.to_thread(pgserver.get_server, data / "pgdata", cleanup_mode="stop")
    try:
        dsn = await postgres.create_database(str(server.get_uri()), "tideway")
        await asyncio.to_thread(migrate.upgrade, dsn)
        yield server, dsn
    finally:
        await asyncio.to_thread(server.cleanup)
        shutil.rmtree(data, ignore_errors=True)


def _stop(server: Any) -> None:
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=60)


def _start(server: Any) -> None:
    server.ensure_postgres_running()


def _quick(settings: Settings, dsn: str) -> Settings:
    """Nak delays of 20-50 ms and quick reconnects, on the private server."""
    retry = settings.retry.model_copy(update={"redelivery_delay_s": 0.02, "redelivery_cap_s": 0.05})
    limits = settings.postgres_timeouts.model_copy(
        update={"retry_initial_s": 0.05, "retry_max_s": 0.2}
    )
    return settings.model_copy(update={"retry": retry, "postgres_timeouts": limits}).with_services(
        postgres_dsn=dsn
    )


@contextlib.asynccontextmanager
async def _intake(settings: Settings) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(run_intake(settings, stop=stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def _count(dsn: str, sql: str) -> int:
    conn = await postgres.connect(dsn)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def _delivered(settings: Settings) -> int:
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    try:
        info = await nc.jetstream().consumer_info(names.sessions_stream, names.intake_durable)
        return int(info.delivered.consumer_seq)
    finally:
        await nc.close()


async def _at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


async def _dead_letters(settings: Settings) -> int:
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    try:
        info = await nc.jetstream().stream_info(names.sessions_dead_letter_stream)
        return int(info.state.messages)
    finally:
        await nc.close()


def _sessions(tmp_path: Path, n: int) -> list[Path]:
    files = []
    for i in range(n):
        path = tmp_path / f"s{i}.csv"
        path.write_text(f"ts,lat,lon\n2026-03-01T10:00:0{i}Z,52.0,4.{i}\n")
        files.append(path)
    return files


async def test_uploads_during_an_outage_longer_than_the_old_budget_all_become_runs(
    settings: Settings, private_pg: tuple[Any, str], tmp_path: Path
) -> None:
    server, dsn = private_pg
    quick = _quick(settings, dsn)
    await provision_sessions(quick)
    files = _sessions(tmp_path, 3)
    async with _intake(quick):
        await wait_until(
            lambda: _at_least(
                lambda: _count(
                    dsn, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'tideway'"
                ),
                1,
            )
        )
        await asyncio.to_thread(_stop, server)
        for i, path in enumerate(files):  # the uploader is told "accepted" each time
            await upload_files(quick, tenant="acme", device=f"d{i}", paths=[path])
        # Every notice is redelivered well past the old budget of 20 deliveries.
        await wait_until(
            lambda: _at_least(lambda: _delivered(quick), len(files) * (OLD_BUDGET + 5)), within=60
        )
        assert await _dead_letters(quick) == 0  # an outage is nobody's fault
        await asyncio.to_thread(_start, server)

        async def runs() -> bool:
            with contextlib.suppress(Exception):
                return await _count(dsn, "SELECT count(*) FROM processing_runs") == len(files)
            return False

        await wait_until(runs, within=60)
    assert await _dead_letters(quick) == 0


async def test_intake_started_while_postgres_is_down_waits_for_it(
    settings: Settings, private_pg: tuple[Any, str], nmea_file: Path
) -> None:
    """Item 10: no hand-rolled loop and no exit - intake retries (tenacity) until it is up."""
    server, dsn = private_pg
    quick = _quick(settings, dsn)
    await provision_sessions(quick)
    await asyncio.to_thread(_stop, server)
    async with _intake(quick) as task:
        await asyncio.sleep(1.0)  # several connect attempts fail meanwhile
        assert not task.done()  # still waiting, not crashed
        await upload_files(quick, tenant="acme", device="d1", paths=[nmea_file])
        await asyncio.to_thread(_start, server)

        async def one_run() -> bool:
            with contextlib.suppress(Exception):
                return await _count(dsn, "SELECT count(*) FROM processing_runs") == 1
            return False

        await wait_until(one_run, within=60)


async def _cli(*args: str) -> Any:
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


async def test_a_notice_that_can_never_succeed_is_listed_shown_and_redriven(
    settings: Settings,
    private_pg: tuple[Any, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A notice naming an artifact that is not in the object store is dead-lettered
    (``ARTIFACT_MISSING``); ``tideway sessions dlq`` lists and shows it and, once the file is
    there, redrives it into a run and out of the dead-letter stream."""
    _, dsn = private_pg
    quick = _quick(settings, dsn)
    for name, value in (
        ("TIDEWAY_POSTGRES_DSN", dsn),
        ("TIDEWAY_NATS_URL", quick.nats()),
        ("TIDEWAY_NAMESPACE", quick.namespace),
        ("TIDEWAY_OBJECT_STORE", quick.objects()),
    ):
        monkeypatch.setenv(name, value)
    names = Names(namespace=quick.namespace)
    path = _sessions(tmp_path, 1)[0]
    # What the artifact will be once stored (stored in a scratch store to learn its hash).
    ghost = store_file(ObjectStore(str(tmp_path / "scratch")), "acme", path, max_bytes=10**6)
    await provision_sessions(quick)
    async with _intake(quick):
        nc = await nats.connect(quick.nats())
        try:
            await nc.jetstream().publish(
                names.sessions_subject("acme", "kart-1"),
                SessionNotice(
                    artifacts=(
                        NoticeArtifact(name=ghost.name, sha256=ghost.sha256, size=ghost.size),
                    )
                ).encode(),
            )
        finally:
            await nc.close()
        await wait_until(lambda: _at_least(lambda: _dead_letters(quick), 1), within=20)

        listed = await _cli("sessions", "dlq", "list", "--json")
        assert listed.exit_code == 0, listed.output
        rows = orjson.loads(listed.output)
        assert [(r["tenant"], r["device"], r["code"]) for r in rows] == [
            ("acme", "kart-1", "ARTIFACT_MISSING")
        ]
        other = orjson.loads(
            (await _cli("sessions", "dlq", "list", "--tenant", "globex", "--json")).output
        )
        assert other == []
        dead_id = rows[0]["id"]
        shown = await _cli("sessions", "dlq", "show", str(dead_id), "--json")
        assert shown.exit_code == 0, shown.output
        record = orjson.loads(shown.output)
        assert record["subject"] == names.sessions_subject("acme", "kart-1")
        assert orjson.loads(record["notice"])["artifacts"][0]["sha256"] == ghost.sha256
        # Spec 003's fields, read back through the CLI.
        assert (record["error_type"], record["retry_count"], record["deliveries"]) == (
            "permanent", 0, 1)
        assert record["stack_trace"] is None  # refused for what it is: no bug to locate
        assert record["first_seen_at"] <= record["last_seen_at"]
        assert (rows[0]["error_type"], rows[0]["retry_count"]) == ("permanent", 0)

        store_file(ObjectStore(quick.objects()), "acme", path, max_bytes=10**6)  # the fix
        redriven = await _cli("sessions", "dlq", "redrive", str(dead_id), "--json")
        assert redriven.exit_code == 0, redriven.output
        assert orjson.loads(redriven.output) == {"redriven": [dead_id], "not_found": []}

        async def one_run() -> bool:
            return await _count(dsn, "SELECT count(*) FROM processing_runs") == 1

        await wait_until(one_run, within=20)
    assert await _dead_letters(quick) == 0
    again = await _cli("sessions", "dlq", "redrive", str(dead_id))
    assert again.exit_code == 3  # no longer a dead letter
