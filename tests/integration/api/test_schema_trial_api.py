"""``POST /v1/devices/{device}/schema-trial``: a stored version tried on a device's recorded
envelopes through the API, as the CLI tries a file; another tenant's device is not found."""

from __future__ import annotations

from collections import Counter
from typing import Any

from schemas.device_schema import parse_schema_text
from streams import registry
from tests.integration.api.conftest import api_client, key_headers
from tests.integration.ingest.conftest import Harness
from tests.integration.ingest.test_schema_trial import (
    TIGHT_MAX,
    _record,
    candidate_text,
    expected_outcome,
    sent_envelopes,
)


async def test_trial_of_a_stored_version(fleet: Harness, pool: Any) -> None:
    sent = sent_envelopes("d1", n=300)
    await _record(fleet, "d1", sent)
    text = candidate_text()
    async with fleet.pool.acquire() as conn:  # stored as v2, assigned to no device
        await registry.apply_schema(conn, parse_schema_text(text), source_text=text)
    then = Counter(expected_outcome(e["payload"]["values"], TIGHT_MAX) for e in sent)
    acme, globex = await key_headers(pool, "acme"), await key_headers(pool, "globex")
    async with api_client(fleet.settings, pool) as client:
        resp = await client.post("/v1/devices/d1/schema-trial", headers=acme,
                                 json={"schema": "weather-station", "last": 300})
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["version"] == 2 and body["tried"] == 300 and body["compared"] == 300
        assert body["statuses"] == dict(then)
        assert body["flagged"] is True
        assert "tenant" not in body  # operator-only
        first = body["envelopes"][0]
        assert first["old_status"] == "completed" and first["new_status"] == "failed_validation"
        assert first["new_reasons"] == ["OUT_OF_RANGE"] and first["old_version"] == 1
        # The version the device is on changes nothing.
        resp = await client.post("/v1/devices/d1/schema-trial", headers=acme,
                                 json={"schema": "weather-station", "version": 1})
        same = await resp.json()
        assert same["status_changed"] == 0 and same["parameters"] == {}
        # Not found: another tenant's device, an unknown version or topic; bad input: 400.
        for who, payload in ((globex, {"schema": "weather-station"}),
                             (acme, {"schema": "weather-station", "version": 9}),
                             (acme, {"schema": "weather-station", "topic": "nope"})):
            resp = await client.post("/v1/devices/d1/schema-trial", headers=who, json=payload)
            assert resp.status == 404, await resp.text()
        resp = await client.post("/v1/devices/d1/schema-trial", headers=acme,
                                 json={"schema": "weather-station", "last": 0})
        assert resp.status == 400
