"""Every batch-side Postgres call has a time limit (issue 15 item 10): a statement past
``postgres_timeouts.command_s`` is cancelled, and intake defers the notice (``PG_TIMEOUT``)
instead of hanging on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import pytest

from streams.adapters import postgres
from streams.config import Settings
from streams.names import Names
from streams.sessions.upload import upload_files
from tests.integration.sessions.conftest import running_intake, wait_until


def _limited(settings: Settings, command_s: float = 0.3) -> Settings:
    limits = settings.postgres_timeouts.model_copy(update={"command_s": command_s})
    retry = settings.retry.model_copy(update={"redelivery_delay_s": 0.05, "redelivery_cap_s": 0.1})
    return settings.model_copy(update={"postgres_timeouts": limits, "retry": retry})


async def test_batch_pools_and_connections_cancel_a_statement_past_command_s(
    settings: Settings,
) -> None:
    limited = _limited(settings)
    shape = postgres.batch_pool(postgres.INTAKE_POOL, limited.postgres_timeouts)
    assert (shape.command_timeout, shape.max_size) == (0.3, postgres.INTAKE_POOL.max_size)
    pool = await postgres.create_pool(limited.postgres(), shape)
    try:
        async with pool.acquire() as conn:
            with pytest.raises(TimeoutError):
                await conn.execute("SELECT pg_sleep(5)")
    finally:
        await pool.close()
    conn = await postgres.connect(limited.postgres(), limits=limited.postgres_timeouts)
    try:
        with pytest.raises(TimeoutError):
            await conn.execute("SELECT pg_sleep(5)")
    finally:
        await conn.close()


async def test_intake_defers_a_notice_whose_statement_hangs(
    settings: Settings, pool: Any, nmea_file: Path
) -> None:
    """A lock held elsewhere makes intake's transaction wait: each delivery is cut off after
    ``command_s`` and nak'ed (never dead-lettered); once the lock goes, the run is made."""
    limited = _limited(settings)
    names = Names(namespace=settings.namespace)
    nc = await nats.connect(settings.nats())
    js = nc.jetstream()

    async def deliveries() -> bool:
        info = await js.consumer_info(names.sessions_stream, names.intake_durable)
        return int(info.delivered.consumer_seq) >= 3

    async def runs() -> int:
        async with pool.acquire() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM processing_runs"))

    try:
        async with running_intake(limited):
            holder = await postgres.connect(settings.postgres())
            try:
                # Intake's transaction inserts a session; the upload itself never does.
                await holder.execute("BEGIN; LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
                await upload_files(limited, tenant="acme", device="d1", paths=[nmea_file])
                await wait_until(deliveries, within=30)  # redelivered, not stuck on one
                assert await runs() == 0
                await holder.execute("ROLLBACK")
            finally:
                await holder.close()
            await wait_until(runs, within=30)
        info = await js.stream_info(names.sessions_dead_letter_stream)
    finally:
        await nc.close()
    assert info.state.messages == 0
