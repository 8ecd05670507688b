"""The API's routes doing what their CLI commands do: pages that follow ``next`` to the end,
run and session actions, dead letters triaged by group, devices, schemas, explain."""

from __future__ import annotations

import socket
from typing import Any

from streams.config import Settings
from streams.ingest.fleet import SCHEMA_NAME
from tests.integration.api.conftest import Client, Seeded, api_client, bad_notice, key_headers
from tests.integration.ingest.conftest import Harness, good_values


async def _all_pages(client: Client, path: str, headers: dict[str, str]) -> list[Any]:
    items: list[Any] = []
    next_: str | None = path
    while next_ is not None:
        resp = await client.get(next_, headers=headers)
        assert resp.status == 200, await resp.text()
        page = await resp.json()
        assert len(page["items"]) <= 2 or "limit=2" not in path
        items += page["items"]
        next_ = page["next"]
    return items


async def test_lists_page_by_opaque_cursor_to_the_end(seeded: Seeded) -> None:
    client, acme = seeded.client, seeded.acme
    every = await (await client.get("/v1/devices", headers=acme)).json()
    assert every["next"] is None
    paged = await _all_pages(client, "/v1/devices?limit=2&active=true", acme)
    assert [d["external_id"] for d in paged] == [
        d["external_id"] for d in every["items"] if d["active"]
    ]
    assert len({d["external_id"] for d in paged}) == len(paged) >= 3
    resp = await client.get("/v1/devices?limit=2", headers=acme)
    assert (await resp.json())["next"].startswith("/v1/devices?limit=2&cursor=")
    assert resp.headers["X-Request-Id"]
    for bad in ("limit=0", "limit=201", "cursor=not-ours", "active=maybe"):
        resp = await client.get(f"/v1/devices?{bad}", headers=acme)
        problem = await resp.json()
        assert resp.status == 400 and problem["code"] == "USAGE_ERROR", bad
        assert problem["request_id"] == resp.headers["X-Request-Id"]
    # Dead letters page by id, and the sample of each group is its oldest dead letter.
    dead = await _all_pages(client, "/v1/dead-letters?limit=1", acme)
    assert [d["id"] for d in dead] == sorted(d["id"] for d in dead) and len(dead) == 2


async def test_run_and_session_actions(seeded: Seeded) -> None:
    client, acme = seeded.client, seeded.acme
    runs = await (await client.get("/v1/runs", headers=acme)).json()
    assert [r["id"] for r in runs["items"]] == [seeded.run_id]
    run_path = f"/v1/runs/{seeded.run_id}"
    dag = await (await client.get(f"{run_path}/dag", headers=acme)).json()
    names = [j["name"] for j in dag["jobs"]]
    assert names[0] == "artifact_validate" and "publish_session" in names
    for job in dag["jobs"]:  # dependency order: every job after the jobs it waits for
        assert all(names.index(d["on"]) < names.index(job["name"]) for d in job["deps"])
    assert any(j["deps"] for j in dag["jobs"]) and dag["status"] == "pending"
    # Only the first job could start (it waits for nothing); the others wait for theirs.
    queued = {j["name"]: j["queued_at"] for j in dag["jobs"] if j["queued_at"]}
    assert queued == {"artifact_validate": dag["jobs"][0]["created_at"]}
    refused = await client.post(f"{run_path}/retry", headers=acme)
    assert refused.status == 409 and (await refused.json())["code"] == "RUN_NOT_RETRIABLE"
    cancelled = await (await client.post(f"{run_path}/cancel", headers=acme)).json()
    assert cancelled["status"] == "cancelled" and cancelled["cancelled"] >= 1
    retried = await client.post(f"{run_path}/retry", headers=acme)
    assert retried.status == 202
    new_run = (await retried.json())["run_id"]
    listed = await (await client.get("/v1/runs?status=pending", headers=acme)).json()
    assert [r["id"] for r in listed["items"]] == [new_run]
    assert listed["items"][0]["retry_of"] == seeded.run_id

    session_path = f"/v1/sessions/{seeded.session_id}"
    reprocessed = await client.post(f"{session_path}/reprocess", json={"priority": 5}, headers=acme)
    assert reprocessed.status == 202, await reprocessed.text()
    started = (await reprocessed.json())["run_id"]
    session = await (await client.get(session_path, headers=acme)).json()
    assert {r["id"] for r in session["runs"]} == {seeded.run_id, new_run, started}
    # Nothing succeeded yet, so there is no good run to roll back to.
    rolled = await client.post(f"{session_path}/rollback", json={}, headers=acme)
    assert rolled.status == 400 or rolled.status == 409
    assert rolled.content_type == "application/problem+json"
    bad = await client.post(f"{session_path}/reprocess", json={"config": {"x": "\u0000"}},
                            headers=acme)  # fmt: skip
    assert bad.status == 400


async def test_devices_and_schemas(seeded: Seeded) -> None:
    client, acme = seeded.client, seeded.acme
    off = await (await client.post("/v1/devices/d1/deactivate", headers=acme)).json()
    assert off["changed"] is True and off["device"]["active"] is False
    again = await (await client.post("/v1/devices/d1/deactivate", headers=acme)).json()
    assert again["changed"] is False
    inactive = await (await client.get("/v1/devices?active=false", headers=acme)).json()
    assert "d1" in [d["external_id"] for d in inactive["items"]]
    on = await (await client.post("/v1/devices/d1/activate", headers=acme)).json()
    assert on["device"]["active"] is True and on["device"]["schema"] == SCHEMA_NAME

    schemas = await (await client.get("/v1/schemas", headers=acme)).json()
    assert [s["name"] for s in schemas["items"]] == [SCHEMA_NAME]
    shown = await (await client.get(f"/v1/schemas/{SCHEMA_NAME}?version=1", headers=acme)).json()
    assert shown["version"] == 1 and shown["parameters"]
    assert (await client.get(f"/v1/schemas/{SCHEMA_NAME}?version=9", headers=acme)).status == 404
    test = f"/v1/schemas/{SCHEMA_NAME}/test"
    ok = await (
        await client.post(test, json={"payload": good_values(), "topic": "state"}, headers=acme)
    ).json()
    assert "outcome" in ok, ok
    assert ok["outcome"] == "processed" and ok["validate"]["ok"] is True
    envelope = {"ts": 1, "values": {**good_values(), "temp": "hot"}}
    body = {"payload": envelope, "topic": "state"}
    bad = await (await client.post(test, json=body, headers=acme)).json()
    assert bad["outcome"] == "failed_validation" and bad["validate"]["issues"]
    extra = await client.post(test, json={"payload": {}, "nope": 1}, headers=acme)
    assert extra.status == 400


async def test_explain_an_envelope_by_id_or_key(seeded: Seeded) -> None:
    client, acme = seeded.client, seeded.acme
    by_id = await (await client.get(f"/v1/messages/{seeded.message_id}", headers=acme)).json()
    by_key = await (await client.get(f"/v1/messages/{seeded.message_key}", headers=acme)).json()
    assert by_id["message"]["id"] == by_key["message"]["id"] == seeded.message_id
    assert [s["stage"] for s in by_id["stages"]][:2] == ["ingress", "validate"]
    dead = await (
        await client.get(f"/v1/dead-letters/{seeded.dead_letter_id}", headers=acme)
    ).json()
    shown = await (
        await client.get(f"/v1/messages/{dead['ingestion_message_id']}", headers=acme)
    ).json()
    assert shown["dead_letter"]["id"] == seeded.dead_letter_id


async def test_dead_letters_triaged_by_group(seeded: Seeded) -> None:
    client, acme = seeded.client, seeded.acme
    groups = (await (await client.get("/v1/dead-letter-groups", headers=acme)).json())["items"]
    (group,) = groups
    assert group["count"] == 2 and group["stage"] == "ingress" and group["schema"] is None
    assert group["code"] == "ENVELOPE_UNPARSEABLE"
    members = await (await client.get(f"/v1/dead-letters?group={group['id']}",
                                      headers=acme)).json()  # fmt: skip
    assert len(members["items"]) == 2
    oldest = min(m["id"] for m in members["items"])
    assert group["sample"]["id"] == oldest == seeded.dead_letter_id
    shown = await (await client.get(f"/v1/dead-letters/{oldest}", headers=acme)).json()
    assert shown["payload_text"] == group["sample"]["payload_text"]
    assert shown["payload_text"] in {"not json 1", "not json 2"} and shown["envelope"] is None

    one = f"/v1/dead-letters/{seeded.dead_letter_id}/resolve"
    assert (await client.post(one, json={"note": ""}, headers=acme)).status == 400
    done = await (await client.post(one, json={"note": "junk"}, headers=acme)).json()
    assert done == {"resolved": [seeded.dead_letter_id], "not_resolved": []}
    whole = f"/v1/dead-letter-groups/{group['id']}/resolve"
    rest = await (await client.post(whole, json={"note": "all junk"}, headers=acme)).json()
    assert len(rest["resolved"]) == 1
    assert (await (await client.get("/v1/dead-letter-groups", headers=acme)).json())["items"] == []
    resolved = await (await client.get("/v1/dead-letter-groups?state=resolved",
                                       headers=acme)).json()  # fmt: skip
    assert resolved["items"][0]["count"] == 2
    assert (await client.post(whole, json={"note": "again"}, headers=acme)).status == 404


async def test_explain_and_redrive_use_the_apis_shared_pool(seeded: Seeded, fleet: Harness) -> None:
    # The process's settings name a Postgres nobody listens on; its pool is the real one. A
    # handler that opened a pool or a connection of its own would answer 503 PG_UNAVAILABLE.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nowhere = f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/nowhere"
    async with api_client(fleet.settings.with_services(postgres_dsn=nowhere),
                          fleet.pool) as client:  # fmt: skip
        resp = await client.get(f"/v1/messages/{seeded.message_id}", headers=seeded.acme)
        shown = await resp.json()
        assert resp.status == 200, shown
        assert shown["message"]["id"] == seeded.message_id
        one = f"/v1/dead-letters/{seeded.dead_letter_id}/redrive"
        resp = await client.post(one, headers=seeded.acme)
        report = await resp.json()
        assert resp.status == 200, report
        assert report["not_redrivable"] == 1  # a malformed envelope: nothing to publish
        resp = await client.post(f"/v1/dead-letter-groups/{seeded.group_id}/redrive",
                                 headers=seeded.acme)  # fmt: skip
        assert resp.status == 200, await resp.text()


def _closed_port_redis() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


async def test_redrive_a_group_publishes_its_dead_letters(
    fleet: Harness, settings: Settings
) -> None:
    dead = fleet.settings.with_services(redis_url=_closed_port_redis())
    for i in range(3):
        await fleet.publish("d1", {"ts": 2_000 + i, "seq": i, "values": good_values()})
    await fleet.consume(3, settings=dead, within=30)
    acme = await key_headers(fleet.pool, "acme")
    async with api_client(fleet.settings, fleet.pool) as client:
        (group,) = (await (await client.get("/v1/dead-letter-groups", headers=acme)).json())[
            "items"
        ]
        assert group["code"] == "PUBLISH_FAILED" and group["count"] == 3
        assert group["schema"] == SCHEMA_NAME and group["schema_version"] == 1
        resp = await client.post(f"/v1/dead-letter-groups/{group['id']}/redrive", headers=acme)
        report = await resp.json()
        assert resp.status == 200, report
        assert report["completed"] == 3 and report["failed"] == 0
        assert (await (await client.get("/v1/dead-letter-groups", headers=acme)).json())[
            "items"
        ] == []


async def test_session_dead_letters_are_the_callers_only(seeded: Seeded, fleet: Harness) -> None:
    """Notices intake dead-lettered (SESSIONS_DLQ): acme lists its own, never globex's."""
    client, acme, globex = seeded.client, seeded.acme, seeded.globex
    await bad_notice(fleet.settings, "globex", "rival-1")
    await bad_notice(fleet.settings, "acme", "kart-3")
    ours = await _all_pages(client, "/v1/session-dead-letters?limit=1", acme)
    assert [d["device"] for d in ours] == ["kart-2", "kart-3"]  # oldest first, by id
    assert ours[0]["id"] < ours[1]["id"]
    for dead in ours:
        assert dead["code"] == "BAD_NOTICE" and dead["message"], dead
        assert dead["subject"].endswith(f".acme.{dead['device']}")
        assert (dead["error_type"], dead["retry_count"]) == ("permanent", 0)
        assert dead["first_seen_at"] <= dead["last_seen_at"]
        assert "notice" not in dead and "stack_trace" not in dead
    theirs = await (await client.get("/v1/session-dead-letters", headers=globex)).json()
    assert [d["device"] for d in theirs["items"]] == ["rival-1"]
    # A cursor of globex's id on acme's list still reads acme's subjects only.
    every = await (await client.get("/v1/session-dead-letters", headers=acme)).json()
    assert "rival-1" not in {d["device"] for d in every["items"]}
