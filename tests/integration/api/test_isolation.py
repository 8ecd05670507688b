"""Tenant isolation, route by route: every route of the table is walked with another tenant's
key. Every id of acme is "not found" for globex (404, not 403: existence does not leak), no
action of globex changes anything of acme's, and no list globex reads holds acme's rows - while
acme, on the same routes, sees them. And a not-found says nothing either: for every route with
a path parameter, acme's real ids, keys and names in every spelling the route accepts are
answered to globex byte for byte as unknown ones of the same shape are."""

from __future__ import annotations

import itertools
import re
import uuid
from typing import Any

from stages.ingest.ingress import key_hash
from streams.api.pages import encode_cursor
from streams.api.routes import ROUTES
from tests.integration.api.conftest import Seeded
from tests.integration.ingest.conftest import Harness, good_values

# Bodies the POST routes need to get past validation (so the 404 is about the id).
_BODIES: dict[str, Any] = {
    "resolve_dead_letter": {"note": "isolation test"},
    "resolve_group": {"note": "isolation test"},
    "test_schema": {"payload": {"temp": 1}, "topic": "state"},
    "reprocess_session": {},
    "rollback_session": {},
    "try_schema": {"schema": "weather-station", "last": 5},
    "add_track": {"name": "isolation", "start_finish": {
        "lat1": 52.0, "lon1": -1.0, "lat2": 52.0002, "lon2": -1.0}},
}
# The upload and a new track create rather than name (tests/integration/sessions/test_api.py,
# tests/integration/api/test_tracks_api.py); the event stream never ends (its isolation is
# tests/integration/api/test_events.py).
_NOT_WALKED = {("POST", "/v1/sessions"), ("GET", "/v1/events"), ("POST", "/v1/tracks")}


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
        .replace("{file}", "laps.csv")
        .replace("{track}", seeded.track)
    )


async def _state(seeded: Seeded) -> Any:
    """What globex must not be able to change: acme's run, dead letters, device and its
    credentials, saved tracks."""
    c, h = seeded.client, seeded.acme
    run = await (await c.get(f"/v1/runs/{seeded.run_id}", headers=h)).json()
    dead = await (await c.get(f"/v1/dead-letters/{seeded.dead_letter_id}", headers=h)).json()
    device = await (await c.get(f"/v1/devices/{seeded.device}", headers=h)).json()
    session = await (await c.get(f"/v1/sessions/{seeded.session_id}", headers=h)).json()
    keys = await (await c.get(f"/v1/devices/{seeded.device}/credentials", headers=h)).json()
    credentials = [(k["key_id"], k["state"]) for k in keys["items"]]
    tracks = [t["name"] for t in (await (await c.get("/v1/tracks", headers=h)).json())["items"]]
    return (run["status"], dead["state"], device["active"], len(session["runs"]), credentials,
            tracks)


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
        if route.path == "/v1/fleet/history":  # charts: globex's buckets count nothing
            assert answer["buckets"], answer
            assert all(b["statuses"] == {} and b["sampled"] == 0 for b in answer["buckets"])
            ours = await (await client.get(path, headers=seeded.acme)).json()
            assert any(b["statuses"] for b in ours["buckets"]), ours
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
        # The seeded session has no run done, so no lap 1: its trace is 404 for acme too, and
        # nothing to export (409 EXPORT_UNAVAILABLE: tests/integration/sessions/test_export.py).
        if route.method == "GET" and "{" in route.path and "{lap}" not in route.path:
            if "{file}" in route.path:
                resp = await client.get(_path(route.path, seeded), headers=seeded.acme)
                assert resp.status == 409, (route.path, await resp.text())
                assert (await resp.json())["code"] == "EXPORT_UNAVAILABLE"
                continue
            resp = await client.get(_path(route.path, seeded), headers=seeded.acme)
            assert resp.status == 200, (route.path, await resp.text())


def _spellings(route_path: str, name: str, seeded: Seeded, msg_key: str) -> list[tuple[str, str]]:
    """``(acme's, unknown)`` pairs for one path parameter: each spelling the route accepts of
    one of acme's things, and a value of the same shape that names nothing."""
    if name == "id" and route_path.startswith("/v1/messages/"):
        digest = key_hash(seeded.message_key)
        return [
            (str(seeded.message_id), str(seeded.message_id + 1_000_000)),
            (seeded.message_key, "r:acme:1:999999"),  # arrival ns and stream seq: no such
            (msg_key, "m:acme:no-such-message"),
            (f"m:globex:{msg_key.split(':', 2)[2]}", "m:globex:no-such-message"),
            (digest, uuid.uuid4().hex),
            (str(uuid.UUID(digest)), str(uuid.uuid4())),
        ]
    if name == "id" and route_path.startswith("/v1/dead-letters/"):
        return [(str(seeded.dead_letter_id), "987654321")]
    if name == "id":
        acme = seeded.run_id if route_path.startswith("/v1/runs/") else seeded.session_id
        return [(acme, str(uuid.uuid4()))]
    return {
        "device": [(seeded.device, "no-such-device")],
        "name": [(seeded.schema, "no-such-schema")],
        "group": [(seeded.group_id, encode_cursor(["NO_SUCH_CODE", "ingress", None, None]))],
        "key_id": [(seeded.credential, "aaaaaaaaaaaaaaaa")],
        "lap": [("1", "1")],
        "file": [("laps.csv", "laps.csv"), ("session.fit", "session.fit")],
        "track": [(seeded.track, "no such track")],
    }[name]


async def test_a_not_found_is_the_same_bytes_whoever_has_the_id(
    seeded: Seeded, fleet: Harness
) -> None:
    # An envelope published with a message id, so its dedupe key is `m:acme:<message id>`.
    await fleet.publish("d1", {"ts": 5_000, "seq": 9, "values": good_values()},
                        msg_id="probe-1")  # fmt: skip
    await fleet.consume(4)
    msg_key = "m:acme:probe-1"
    client = seeded.client
    assert (await client.get(f"/v1/messages/{msg_key}", headers=seeded.acme)).status == 200

    async def answer(method: str, path: str, body: Any, key: dict[str, str]) -> Any:
        # One request id, so the bodies (which carry it) can be compared byte for byte.
        resp = await client.request(method, path, json=body,
                                    headers={**key, "X-Request-Id": "isolation"})  # fmt: skip
        return resp.status, resp.content_type, await resp.read()

    compared = 0
    for route in ROUTES:
        names = re.findall(r"{(\w+)}", route.path)
        if not names or (route.method, route.path) in _NOT_WALKED:
            continue
        body = _BODIES.get(route.operation_id)
        options = [_spellings(route.path, name, seeded, msg_key) for name in names]
        for pairs in itertools.product(*options):
            theirs, unknown = route.path, route.path
            for name, (acme_value, unknown_value) in zip(names, pairs, strict=True):
                theirs = theirs.replace(f"{{{name}}}", acme_value)
                unknown = unknown.replace(f"{{{name}}}", unknown_value)
            expected = await answer(route.method, unknown, body, seeded.globex)
            assert expected[:2] == (404, "application/problem+json"), (unknown, expected)
            assert await answer(route.method, theirs, body, seeded.globex) == expected, theirs
            # And the text is the route's, not the tenant's: acme's unknown reads the same.
            assert await answer(route.method, unknown, body, seeded.acme) == expected, unknown
            compared += 1
    assert compared >= 30
