"""The API does what its OpenAPI document says, where the two once disagreed (issue 26): a JSON
body is required and labelled ``application/json``, reprocess checks its run config as the
upload does, and path parameters are held to their documented patterns."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from streams.api.routes import ROUTES
from tests.integration.api.conftest import Client, Seeded

# A body each JSON route accepts (what it then does with acme's things does not matter here).
_BODIES: dict[str, Any] = {
    "reprocess_session": {},
    "rollback_session": {},
    "test_schema": {"payload": {"temp": 1}, "topic": "state"},
    "try_schema": {"schema": "weather-station", "last": 5},
    "resolve_dead_letter": {"note": "contract test"},
    "resolve_group": {"note": "contract test"},
    "add_track": {"name": "contract", "start_finish": {
        "lat1": 52.0, "lon1": -1.0, "lat2": 52.0002, "lon2": -1.0}},
}
_BAD_CONFIG = {"laps": {"min_lap_sx": 5}}


def _path(template: str, seeded: Seeded) -> str:
    prefix = template.split("/")[2]
    ids = {"sessions": seeded.session_id, "dead-letters": str(seeded.dead_letter_id)}
    return (
        template.replace("{id}", ids.get(prefix, ""))
        .replace("{name}", seeded.schema)
        .replace("{group}", seeded.group_id)
        .replace("{device}", seeded.device)
    )


async def _runs(client: Client, seeded: Seeded) -> int:
    session = await client.get(f"/v1/sessions/{seeded.session_id}", headers=seeded.acme)
    return len((await session.json())["runs"])


def _json_routes() -> list[Any]:
    routes = [r for r in ROUTES if r.body is not None]
    assert {r.operation_id for r in routes} == set(_BODIES)
    return routes


async def test_a_json_body_sent_as_anything_else_is_a_415(seeded: Seeded) -> None:
    client, runs = seeded.client, await _runs(seeded.client, seeded)
    for route in _json_routes():
        body = orjson.dumps(_BODIES[route.operation_id]).decode()
        # None: the client's own label for bytes (application/octet-stream).
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {**seeded.acme, **({"Content-Type": content_type} if content_type else {})}
            resp = await client.request(route.method, _path(route.path, seeded),
                                        data=body.encode(), headers=headers)  # fmt: skip
            problem = await resp.json(content_type=None)
            assert resp.status == 415, (route.path, content_type, problem)
            assert resp.content_type == "application/problem+json"
            assert problem["code"] == "UNSUPPORTED_MEDIA_TYPE"
            assert problem["request_id"] == resp.headers["X-Request-Id"]
    assert await _runs(client, seeded) == runs  # no reprocess went through


async def test_a_json_route_without_its_body_is_refused(seeded: Seeded) -> None:
    client, runs = seeded.client, await _runs(seeded.client, seeded)
    for route in _json_routes():
        for headers in ({}, {"Content-Type": "application/json"}):
            resp = await client.request(route.method, _path(route.path, seeded),
                                        headers={**seeded.acme, **headers})  # fmt: skip
            problem = await resp.json()
            assert resp.status == 400, (route.path, problem)
            assert problem["code"] == "USAGE_ERROR"
            assert "body is required" in problem["detail"]
    assert await _runs(client, seeded) == runs  # reprocess without a body started nothing
    ok = await client.post(f"/v1/sessions/{seeded.session_id}/reprocess", json={},
                           headers=seeded.acme)  # fmt: skip
    assert ok.status == 202, await ok.text()  # `{}`: every default


async def test_reprocess_refuses_a_bad_run_config_as_the_upload_does(seeded: Seeded) -> None:
    client, runs = seeded.client, await _runs(seeded.client, seeded)
    form = aiohttp.FormData()
    form.add_field("device", "kart-1")
    form.add_field("config", orjson.dumps(_BAD_CONFIG).decode())
    form.add_field("file", b"$GPRMC\r\n", filename="x.nmea", content_type="text/plain")
    uploaded = await client.post("/v1/sessions", data=form, headers=seeded.acme)
    upload_refusal = await uploaded.json()
    assert uploaded.status == 400 and upload_refusal["code"] == "INVALID_CONFIG"
    for config in (_BAD_CONFIG, {"laps": {"min_lap_s": "10"}}, {"x\u0000": None}):
        resp = await client.post(f"/v1/sessions/{seeded.session_id}/reprocess",
                                 json={"config": config}, headers=seeded.acme)  # fmt: skip
        problem = await resp.json()
        assert resp.status == 400, problem
        assert problem["code"] == "INVALID_CONFIG", problem
        assert problem["detail"].startswith("invalid run config: config"), problem
    same = await client.post(f"/v1/sessions/{seeded.session_id}/reprocess",
                             json={"config": _BAD_CONFIG}, headers=seeded.acme)  # fmt: skip
    assert (await same.json())["detail"] == upload_refusal["detail"]
    assert await _runs(client, seeded) == runs  # no run was started to fail later
    # A valid config starts a run; an integer written 10.0 is one (as JSON Schema counts it).
    ok = await client.post(f"/v1/sessions/{seeded.session_id}/reprocess",
                           json={"config": {"fusion": {"min_fixes": 10.0}}},
                           headers=seeded.acme)  # fmt: skip
    assert ok.status == 202, await ok.text()


async def test_path_parameters_are_held_to_their_documented_patterns(seeded: Seeded) -> None:
    client = seeded.client
    device_routes = [r for r in ROUTES if "{device}" in r.path]
    for route in device_routes:
        for bad in ("a.b", "d1%0A", "%C3%9F", "a" * 129):
            path = route.path.replace("{device}", bad).replace("{key_id}", seeded.credential)
            resp = await client.request(route.method, path, headers=seeded.acme)
            problem = await resp.json()
            assert resp.status == 400, (path, problem)
            assert problem["detail"].startswith("path parameter 'device' must be a device id")
    for path in (
        f"/v1/devices/{seeded.device}/credentials/NOT-A-KEY-ID",
        "/v1/schemas/Not_A_Slug",
        "/v1/dead-letters/99999999999999999999",
        "/v1/dead-letter-groups/a=b/redrive",
        f"/v1/sessions/{seeded.session_id}/laps/x/trace",
        f"/v1/sessions/{seeded.session_id}/export/laps.xlsx",
        f"/v1/sessions/{seeded.session_id}/export/session.GPX",
        f"/v1/sessions/{seeded.session_id.replace('-', '')}",
        "/v1/messages/no-such-shape",
    ):
        method = "DELETE" if "credentials" in path else "POST" if "redrive" in path else "GET"
        resp = await client.request(method, path, headers=seeded.acme)
        assert resp.status == 400, (path, await resp.text())
    # A value of the documented shape that names nothing is "not found", never a 400.
    for path in ("/v1/messages/9223372036854775807", "/v1/messages/m:acme:nothing"):
        assert (await client.get(path, headers=seeded.acme)).status == 404


async def test_a_schema_test_names_its_topic(seeded: Seeded) -> None:
    client, path = seeded.client, f"/v1/schemas/{seeded.schema}/test"
    resp = await client.post(path, json={"payload": {"temp": 1}}, headers=seeded.acme)
    problem = await resp.json()
    assert resp.status == 400 and problem["detail"] == "body topic: Field required", problem
    resp = await client.post(path, json={"payload": {"temp": 1}, "topic": "nope"},
                             headers=seeded.acme)  # fmt: skip
    assert resp.status == 404
    assert (await resp.json())["detail"] == "no such schema, or no such version or topic of it"
    # NUL in a sample is evaluated like any other text: the sample is never stored.
    resp = await client.post(path, json={"payload": {"note": "a\u0000b"}, "topic": "state"},
                             headers=seeded.acme)  # fmt: skip
    assert resp.status == 200, await resp.text()
