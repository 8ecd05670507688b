"""Shared helpers for the session integration tests: a running intake, a pool, sample files."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stages.jobs.dag import DEFAULT_DAG
from streams.adapters import postgres
from streams.config import Settings
from streams.jobs.worker import run_worker
from streams.sessions.intake import provision_sessions, run_intake
from streams.sessions.stage_executors import SessionExecutors
from tests.shared_data import data_file

NMEA_LOG = "ublox-zed-f9p-nmea.log"


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[object]:
    p = await postgres.create_pool(settings.postgres(), postgres.PoolShape(max_size=4))
    try:
        yield p
    finally:
        await p.close()


@contextlib.asynccontextmanager
async def running_intake(settings: Settings) -> AsyncIterator[None]:
    """Provision SESSIONS and run the intake consumer for the duration of the block."""
    await provision_sessions(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(run_intake(settings, stop=stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``settings`` as the environment of an in-process ``tideway`` command (tenant acme)."""
    monkeypatch.setenv("TIDEWAY_POSTGRES_DSN", settings.postgres())
    monkeypatch.setenv("TIDEWAY_NATS_URL", settings.nats())
    monkeypatch.setenv("TIDEWAY_NAMESPACE", settings.namespace)
    monkeypatch.setenv("TIDEWAY_OBJECT_STORE", settings.objects())
    monkeypatch.setenv("TIDEWAY_DEFAULT_TENANT", "acme")
    return settings


@pytest.fixture
def nmea_file() -> Path:
    return data_file("nmea", NMEA_LOG)


async def wait_until(check: object, within: float = 10.0) -> object:
    """Poll the async callable ``check`` until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = await check()  # type: ignore[operator]
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running_system(
    settings: Settings, executors: SessionExecutors | None = None
) -> AsyncIterator[SessionExecutors]:
    """Intake plus a worker over every pool, as ``tideway up`` runs them (stages in threads)."""
    executors = executors or SessionExecutors(settings, compute="thread", dag=DEFAULT_DAG)
    async with running_intake(settings):
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                settings, executors=executors, pool=None, concurrency=2, stop=stop, dag=DEFAULT_DAG
            )
        )
        try:
            yield executors
        finally:
            stop.set()
            await asyncio.wait_for(worker, 30)
            await executors.aclose()
