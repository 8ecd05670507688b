"""The OpenAPI document: served at /v1/openapi.json without a key, equal to the committed
``docs/openapi.json``, and describing exactly the routes the application serves."""

from __future__ import annotations

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
