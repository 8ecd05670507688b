"""``GET /v1/devices/{device}/series``: the device page's charts from ClickHouse, and what it
answers when the API has no ClickHouse to read (a reason, not a failed call); its times carry
their UTC offset (issue 29: a browser read bare times as local and drew them off the chart)."""

from __future__ import annotations

import datetime as dt
import re

from tests.integration.api.conftest import Seeded
from tests.integration.ingest.conftest import Harness, good_values
from tests.integration.sessions.test_api import api_client


async def test_the_series_of_a_device_and_of_none(seeded: Seeded, fleet: Harness) -> None:
    # The seeded envelope was measured in 1970: the last hour holds none of it ...
    resp = await seeded.client.get("/v1/devices/d1/series", headers=seeded.acme)
    assert resp.status == 200
    body = await resp.json()
    assert (body["parameters"], body["reason"]) == ([], None)
    # ... and another tenant's device is not found.
    resp = await seeded.client.get("/v1/devices/d1/series", headers=seeded.globex)
    assert resp.status == 404

    no_clickhouse = fleet.settings.model_copy(update={"clickhouse_dsn": None})
    async with api_client(no_clickhouse, fleet.pool) as client:
        resp = await client.get("/v1/devices/d1/series", headers=seeded.acme)
        assert resp.status == 200
        assert (await resp.json())["reason"] == "NO_CLICKHOUSE"


async def test_series_times_carry_their_offset_and_booleans_are_marked(
    seeded: Seeded, fleet: Harness
) -> None:
    """Every time is UTC with its offset (a browser in New York or Tokyo reads the same instant),
    the buckets span the readings (a device that began minutes ago is not squeezed into the end
    of the hour), and the schema's boolean is marked as a share of true readings."""
    now = dt.datetime.now(dt.UTC)
    readings = [(now - dt.timedelta(minutes=m), m % 2) for m in (6, 5, 4, 3)]
    for seq, (at, door) in enumerate(readings, start=2):
        ts = int(at.timestamp() * 1000)
        values = {**good_values(20.0 + seq), "door": door}
        await fleet.publish("d1", {"ts": ts, "seq": seq, "values": values})
    await fleet.consume(3 + len(readings))

    resp = await seeded.client.get("/v1/devices/d1/series", headers=seeded.acme)
    assert resp.status == 200
    body = await resp.json()
    # The wire text itself carries the offset: "Z" (or +00:00), never a bare local-looking time.
    texts = [body["since"], body["until"]] + [
        p["t"] for s in body["parameters"] for p in s["points"]
    ]
    assert all(re.search(r"(Z|[+-]\d\d:\d\d)$", t) for t in texts), texts
    times = [dt.datetime.fromisoformat(t) for t in texts]
    assert all(t.utcoffset() == dt.timedelta(0) for t in times)

    series = {s["parameter"]: s for s in body["parameters"]}
    since, until = times[0], times[1]
    temp = [(dt.datetime.fromisoformat(p["t"]), p["value"]) for p in series["temp_c"]["points"]]
    assert [v for _, v in temp] == [22.0, 23.0, 24.0, 25.0]
    assert all(since <= t <= until for t, _ in temp)
    # Fitted to the readings: six minutes of them in a one-hour window, buckets of a round step
    # no wider than the span over 240 (rounded up), the first bucket holding the first reading.
    assert body["step_s"] in (1.0, 2.0)
    step = dt.timedelta(seconds=body["step_s"])
    assert temp[0][0] <= readings[0][0] < temp[0][0] + step
    assert series["temp_c"]["kind"] == "number"
    door = series["door_open"]
    assert door["kind"] == "boolean"
    assert [p["value"] for p in door["points"]] == [0.0, 1.0, 0.0, 1.0]

    # A window without readings still answers aware times, and a step for the window.
    resp = await seeded.client.get("/v1/devices/d2/series?window_minutes=1440", headers=seeded.acme)
    body = await resp.json()
    assert body["parameters"] == [] and body["step_s"] == 600.0
    assert dt.datetime.fromisoformat(body["until"]).utcoffset() == dt.timedelta(0)
