"""``GET /v1/devices/{device}/series``: the device page's charts from ClickHouse, and what it
answers when the API has no ClickHouse to read (a reason, not a failed call)."""

from __future__ import annotations

from tests.integration.api.conftest import Seeded
from tests.integration.ingest.conftest import Harness
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
