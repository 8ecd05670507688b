"""``tideway intake`` counts the notices it handles by outcome and reports its readiness."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from streams.adapters.nats import connect_nats
from streams.config import Settings
from streams.names import Names
from streams.observability.process import ProcessObservability
from streams.sessions.intake import provision_sessions, run_intake
from streams.sessions.upload import upload_files
from tests.integration.observability.conftest import fast, get_json


async def test_notices_are_counted_by_outcome(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"ts": "2026-05-01T12:00:00Z", "lat": 1.0, "lon": 2.0}\n')
    await provision_sessions(settings)
    stop = asyncio.Event()
    async with ProcessObservability(fast(), components=("intake",)) as obs:
        task = asyncio.create_task(run_intake(settings, stop=stop, hooks=obs))
        try:
            await upload_files(settings, tenant="acme", device="d-1", paths=[path])
            nc = await connect_nats(settings.nats, name="test")
            try:  # a notice that can never succeed
                subject = Names(namespace=settings.namespace).sessions_subject("acme", "d-1")
                await nc.jetstream().publish(subject, b"not a notice")
            finally:
                await nc.close()

            def handled(outcome: str) -> float:
                value = obs.metrics.registry.get_sample_value(
                    "tideway_intake_notices_total", {"outcome": outcome})
                return value or 0.0

            deadline = time.monotonic() + 20
            while handled("planned") + handled("rejected") < 2:
                assert time.monotonic() < deadline, "notices not handled in time"
                await asyncio.sleep(0.05)
            assert (handled("planned"), handled("rejected"), handled("deferred")) == (1, 1, 0)
            assert obs.metrics.registry.get_sample_value(
                "tideway_session_dead_letters_total", {"code": "BAD_NOTICE"}) == 1
            status, body = await asyncio.to_thread(get_json, f"{obs.address}/readyz")
            assert status == 200, body
            assert {c["name"] for c in body["checks"]} == {
                "startup", "nats", "postgres", "object_store"}
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
