"""``GET /v1/fleet``: each device's data-quality figures, from envelopes recorded by the real
ingest consumer (gaps, out-of-order arrivals, duplicates, invalid envelopes, latency)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from streams.api.keys import create_api_key
from streams.ingest.provision import provision
from tests.integration.api.conftest import api_client
from tests.integration.ingest.conftest import Harness, good_values


def envelope(seq: int, age_s: float, **values: Any) -> dict[str, Any]:
    ts = int((time.time() - age_s) * 1000)
    return {"ts": ts, "seq": seq, "values": good_values(**values)}


async def test_the_fleet_page_finds_the_sick_device(fleet: Harness) -> None:
    # d1 loses seq 3, delivers 4 after 5, sends seq 2 twice and one invalid envelope;
    # d2 is healthy.
    # JetStream absorbs a repeated message id inside its duplicate window: shrink the window
    # so the repeat reaches Tideway's own dedupe.
    stream = fleet.settings.stream.model_copy(update={"duplicate_window_s": 0.2})
    await provision(fleet.settings.model_copy(update={"stream": stream}))
    again = envelope(2, 8)
    await fleet.publish("d1", envelope(1, 9))
    await fleet.publish("d1", again, msg_id="d1-2")
    await fleet.publish("d1", envelope(5, 7))
    await fleet.publish("d1", envelope(4, 6))
    await asyncio.sleep(0.3)
    await fleet.publish("d1", again, msg_id="d1-2")
    await fleet.publish("d1", {"ts": int(time.time() * 1000), "seq": 6, "values": {"temp": "x"}})
    await fleet.publish("d2", envelope(1, 3))
    await fleet.consume(7)
    async with fleet.pool.acquire() as conn:
        key = await create_api_key(conn, tenant="acme", name="fleet")
        statuses = dict(
            await conn.fetch("SELECT status, count(*) FROM ingestion_messages GROUP BY status")
        )
    headers = {"Authorization": f"Bearer {key.secret}"}
    async with api_client(fleet.settings, fleet.pool) as client:
        resp = await client.get("/v1/fleet?sort=seq_gaps", headers=headers)
        assert resp.status == 200, await resp.text()
        report = await resp.json()
        assert report["statuses"] == statuses
        assert report["matched"] == 2
        sick, healthy = report["devices"]
        assert sick["device"] == "d1" and healthy["device"] == "d2"
        assert sick["seq_gaps"] == 1
        assert sick["out_of_order"] == 1
        assert sick["duplicates"] == 1
        assert sick["envelopes"] == 5
        assert sick["invalid_share"] == 1 / 5
        assert 5 < sick["latency_p50_s"] < 120  # measured 6-9 s before it was sent
        assert 0 < sick["clock_skew_s"] <= sick["latency_p50_s"]
        assert (healthy["seq_gaps"], healthy["out_of_order"], healthy["duplicates"]) == (0, 0, 0)

        found = await (await client.get("/v1/fleet?search=D2", headers=headers)).json()
        assert [d["device"] for d in found["devices"]] == ["d2"] and found["matched"] == 1
        bad = await client.get("/v1/fleet?sort=name", headers=headers)
        assert bad.status == 400
