"""The OpenAPI document: served at /v1/openapi.json without a key, equal to the committed
``docs/openapi.json``, and describing exactly the routes the application serves."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from streams.api.static import is_console_path
from tests.integration.api.conftest import Seeded

COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


async def test_the_served_document_is_the_committed_one(seeded: Seeded) -> None:
    resp = await seeded.client.get("/v1/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    served = await resp.read()
    assert served == COMMITTED.read_bytes(), (
        "docs/openapi.json is stale: regenerate it with `python -m streams.api > docs/openapi.json`"
    )
    doc = orjson.loads(served)
    assert doc["openapi"].startswith("3.1")
    app = seeded.client.server.app
    assert app is not None
    routed = {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None
        and r.method != "HEAD"
        and not is_console_path(r.resource.canonical)  # the console's files: not the API
    }
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert described == routed


def test_the_document_says_what_the_api_holds_requests_to() -> None:
    doc = orjson.loads(COMMITTED.read_bytes())
    schemas = doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for op in ops.values():
            params = {p["name"]: p for p in op.get("parameters", ())}
            if "{device}" in path:  # the device id pattern (streams/identity/ids.py)
                assert params["device"]["schema"]["pattern"] == "^[A-Za-z0-9_-]{1,128}$"
            if "cursor" in params:  # the cursor's alphabet, and no `null` a query cannot say
                assert params["cursor"]["schema"] == {
                    "type": "string", "pattern": "^[A-Za-z0-9_-]{1,1000}$"}  # fmt: skip
                assert "base64url" in params["cursor"]["description"]
            if "requestBody" in op:  # every body is required, and a JSON one may be a 415
                assert op["requestBody"]["required"] is True
                if "application/json" in op["requestBody"]["content"]:
                    assert "415" in op["responses"]
            for name in re.findall(r"{(\w+)}", path):  # every path parameter has a shape
                schema = params[name]["schema"]
                assert "pattern" in schema or "format" in schema or "maximum" in schema, name
            if "{" in path:  # and every 404 says the one text of its route
                assert "The detail is always" in op["responses"]["404"]["description"]
    key = doc["paths"]["/v1/messages/{id}"]["get"]["parameters"][0]["schema"]["pattern"]
    assert "m:[a-z0-9][a-z0-9_-]{0,62}:" in key  # a dedupe key names its tenant
    test = schemas["SchemaTestRequest"]
    assert test["required"] == ["payload", "topic"]
    assert test["properties"]["topic"]["pattern"] == "^[A-Za-z0-9_-]{1,64}$"
    config = schemas["ReprocessRequest"]["properties"]["config"]["anyOf"][0]
    if "$ref" in config:  # a component since the tracks' bodies share its StartFinish
        config = schemas[config["$ref"].rsplit("/", 1)[1]]
    assert config["additionalProperties"] is False and "laps" in config["properties"]
    assert schemas["DevicePage"]["properties"]["next"]["anyOf"][0]["pattern"] == "^/v1/"
