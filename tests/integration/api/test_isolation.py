"""Tenant isolation, route by route: every route of the table is walked with another tenant's
key. Every id of acme is "not found" for globex (404, not 403: existence does not leak), no
action of globex changes anything of acme's, and no list globex reads holds acme's rows - while
acme, on the same routes, sees them."""

from __future__ import annotations

import re
from typing import Any

from streams.api.routes import ROUTES
from tests.integration.api.conftest import Seeded

# Bodies the POST routes need to get past validation (so the 404 is about the id).
_BODIES: dict[str, Any] = {
    "resolve_dead_letter": {"note": "isolation test"},
    "resolve_group": {"note": "isolation test"},
    "test_schema": {"payload": {"temp": 1}},
    "reprocess_session": {},
    "rollback_session": {},
}
# The upload creates rather than names (tests/integration/sessions/test_api.py); the event
# stream never ends (its isolation is tests/integration/api/test_events.py).
_NOT_WALKED = {("POST", "/v1/sessions"), ("GET", "/v1/events")}


def _path(template: str, seeded: Seeded) -> str:
    ids = {
        "/v1/sessions/{id}": seeded.session_id,
        "/v1/runs/{id}": seeded.run_id,
        "/v1/dead-letters/{id}": str(seeded.dead_letter_id),
        "/v1/messages/{id}": str(seeded.message_id),
    }
    prefix = re.match(r"/v1/[a-z-]+/\{id\}", template)
    filled = template.replace("{id}", ids[prefix.group(0)]) if prefix else template
    return (
        filled.replace("{device}", seeded.device)
        .replace("{name}", seeded.schema)
        .replace("{group}", seeded.group_id)
        .replace("{lap}", "1")
        .replace("{key_id}", seeded.credential)
    )


async def _state(seeded: Seeded) -> Any:
    """What globex must not be able to change: acme's run, dead letters, device and its
    credentials."""
    c, h = seeded.client, seeded.acme
    run = await (await c.get(f"/v1/runs/{seeded.run_id}", headers=h)).json()
    dead = await (await c.get(f"/v1/dead-letters/{seeded.dead_letter_id}", headers=h)).json()
    device = await (await c.get(f"/v1/devices/{seeded.device}", headers=h)).json()
    session = await (await c.get(f"/v1/sessions/{seeded.session_id}", headers=h)).json()
    keys = await (await c.get(f"/v1/devices/{seeded.device}/credentials", headers=h)).json()
    credentials = [(k["key_id"], k["state"]) for k in keys["items"]]
    return run["status"], dead["state"], device["active"], len(session["runs"]), credentials


async def test_every_route_hides_one_tenants_things_from_another(seeded: Seeded) -> None:
    client = seeded.client
    before = await _state(seeded)
    walked = set()
    for route in ROUTES:
        if route.public or (route.method, route.path) in _NOT_WALKED:
            continue
        walked.add((route.method, route.path))
        path = _path(route.path, seeded)
        body = _BODIES.get(route.operation_id)
        theirs = await client.request(route.method, path, json=body, headers=seeded.globex)
        answer = await theirs.json()
        if "{" in route.path:
            assert theirs.status == 404, (route.path, answer)
            assert answer["code"] == "NOT_FOUND"
            assert theirs.content_type == "application/problem+json"
            continue
        assert theirs.status == 200, (route.path, answer)
        if route.path == "/v1/fleet":  # a report: globex's counts nothing, acme's does
            assert (answer["devices"], answer["statuses"], answer["open_dead_letters"]) == (
                [], {}, 0)  # fmt: skip
            ours = await (await client.get(path, headers=seeded.acme)).json()
            assert ours["devices"] and ours["open_dead_letters"], ours
            continue
        if route.path == "/v1/fleet/live":  # globex recorded nothing; the consumer is shared
            assert (answer["envelopes"], answer["end_to_end_p50_s"]) == (0, None), answer
            ours = await (await client.get(path, headers=seeded.acme)).json()
            assert ours["envelopes"] and ours["end_to_end_p50_s"] is not None, ours
            continue
        # A list: globex's is empty, acme's on the same route is not.
        assert answer == {"items": [], "next": None}, route.path
        ours = await (await client.get(path, headers=seeded.acme)).json()
        assert ours["items"], f"acme sees nothing on {route.path}: the check would be vacuous"
    expected = {(r.method, r.path) for r in ROUTES if not r.public} - _NOT_WALKED
    assert walked == expected
    # Nothing globex asked for changed anything of acme's.
    assert await _state(seeded) == before

    # A dedupe key names an envelope as well as its id does: not found for globex either.
    resp = await client.get(f"/v1/messages/{seeded.message_key}", headers=seeded.globex)
    assert resp.status == 404
    # And acme reads every one of its things on the same routes.
    for route in ROUTES:
        # The seeded session has no run done, so no lap 1: its trace is 404 for acme too.
        if route.method == "GET" and "{" in route.path and "{lap}" not in route.path:
            resp = await client.get(_path(route.path, seeded), headers=seeded.acme)
            assert resp.status == 200, (route.path, await resp.text())
