"""Property-based tests from the OpenAPI document (schemathesis): whatever a client sends to
any route, the API answers with a documented status, content type and body - and never a 500.

Run against the real application over real Postgres and NATS, with tenant acme's key and its
seeded things, so generated requests reach the handlers' queries and not only the validation.
Two kinds of route are left out: the upload (``POST /v1/sessions``) waits up to 5 s for intake
per request and has its own edge tests (tests/integration/sessions/test_api_errors.py), and
redrive connects to Redis and ClickHouse per request (tested in test_routes.py), and the event
stream never ends (test_events.py). Bounded: a
few examples per route. Every check runs but one: "a schema-valid request is accepted" cannot
hold for an opaque cursor (any string is schema-valid, only the API's own are accepted, and a
foreign one is a documented 400). Schemathesis calls are blocking, so they run in a thread while the
event loop serves them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.integration.api.conftest import Seeded

_SKIP = {"post_session", "redrive_dead_letter", "redrive_group", "stream_events"}
_EXAMPLES = 12


def _run(doc: dict[str, Any], base_url: str, headers: dict[str, str]) -> list[str]:
    schema = schemathesis.openapi.from_dict(doc)
    tried = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.definition.raw.get("operationId") in _SKIP:
            continue
        tried.append(operation.label)

        @hypothesis_settings(
            max_examples=_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            case.call_and_validate(
                base_url=base_url, headers=headers, excluded_checks=[positive_data_acceptance]
            )

        check()
    return tried


async def test_no_generated_request_gets_a_500(seeded: Seeded) -> None:
    doc = orjson.loads(await (await seeded.client.get("/v1/openapi.json")).read())
    base_url = str(seeded.client.make_url("")).rstrip("/")
    tried = await asyncio.to_thread(_run, doc, base_url, seeded.acme)
    assert len(tried) == len(doc_operations(doc)) - len(_SKIP)


def doc_operations(doc: dict[str, Any]) -> list[str]:
    return [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
