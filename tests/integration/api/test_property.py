"""Property-based tests from the OpenAPI document (schemathesis): whatever a client sends to
any route, the API answers with a documented status, content type and body - never a 500 -
and a request the document calls valid is not refused as malformed (400, 415, 422).

Run against the real application over real Postgres and NATS, with tenant acme's key and its
seeded things, so generated requests reach the handlers' queries and not only the validation:
each route is tried with generated path parameters, then again with acme's real ids, keys and
names in its path (a random id is only ever "not found"; a real one reaches the action).
Two kinds of route are left out: the upload (``POST /v1/sessions``) waits up to 5 s for intake
per request and has its own edge tests (tests/integration/sessions/test_api_errors.py), and
redrive connects to Redis and ClickHouse per request (tested in test_routes.py), and the event
stream never ends (test_events.py). Bounded: a few examples per route.

Every check runs, with one exception the document itself states: a ``cursor`` is opaque, so
any string of its alphabet is schema-valid while only the API's own are accepted (a foreign
one is a documented 400). "A schema-valid request is accepted" is therefore waived for a
request that carries a ``cursor`` - and only for it. Schemathesis calls are blocking, so they
run in a thread while the event loop serves them.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.integration.api.conftest import Seeded

_SKIP = {"post_session", "redrive_dead_letter", "redrive_group", "stream_events"}
_EXAMPLES = 12


def _accepted_unless_foreign_cursor(ctx: Any, response: Any, case: Any) -> bool | None:
    """Schemathesis's "a schema-valid request is accepted", except for a generated cursor."""
    if case.query and "cursor" in case.query:
        return None
    result: bool | None = positive_data_acceptance(ctx, response, case)
    return result


def _real_ids(seeded: Seeded) -> dict[str, dict[str, str]]:
    """Acme's things by the path they appear in: ``{prefix: {parameter: value}}``."""
    return {
        "/v1/sessions/{id}": {"id": seeded.session_id},
        "/v1/runs/{id}": {"id": seeded.run_id},
        "/v1/devices/{device}": {"device": seeded.device, "key_id": seeded.credential},
        "/v1/schemas/{name}": {"name": seeded.schema},
        "/v1/dead-letter-groups/{group}": {"group": seeded.group_id},
        "/v1/dead-letters/{id}": {"id": str(seeded.dead_letter_id)},
        "/v1/messages/{id}": {"id": str(seeded.message_id)},
    }


def _run(doc: dict[str, Any], base_url: str, headers: dict[str, str],
         real: dict[str, dict[str, str]]) -> list[str]:  # fmt: skip
    schema = schemathesis.openapi.from_dict(doc)
    tried = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.definition.raw.get("operationId") in _SKIP:
            continue
        tried.append(operation.label)
        prefix = re.match(r"/v1/[a-z-]+/\{\w+\}", operation.path)
        ours = real.get(prefix.group(0), {}) if prefix else {}

        def with_ours(case: Any, ours: dict[str, str] = ours) -> Any:
            case.path_parameters = {
                name: ours.get(name, value) for name, value in case.path_parameters.items()
            }
            return case

        strategies = [operation.as_strategy()]
        if ours:
            strategies.append(operation.as_strategy().map(with_ours))
        for strategy in strategies:

            @hypothesis_settings(
                max_examples=_EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def check(case: Any) -> None:
                case.call_and_validate(
                    base_url=base_url,
                    headers=headers,
                    excluded_checks=[positive_data_acceptance],
                    additional_checks=[_accepted_unless_foreign_cursor],
                )

            check()
    return tried


async def test_no_generated_request_gets_a_500_or_a_wrong_refusal(seeded: Seeded) -> None:
    doc = orjson.loads(await (await seeded.client.get("/v1/openapi.json")).read())
    base_url = str(seeded.client.make_url("")).rstrip("/")
    tried = await asyncio.to_thread(_run, doc, base_url, seeded.acme, _real_ids(seeded))
    assert len(tried) == len(doc_operations(doc)) - len(_SKIP)


def doc_operations(doc: dict[str, Any]) -> list[str]:
    return [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
