"""One envelope explained (``tideway messages show``): its stages, dead letter, duplicates and
where it was published.

Explain is the CLI's function: it reads Postgres through the API's shared pool (no pool or
connection of its own per request), an archive when the rows are gone, and Redis for the hot
state it reached. An envelope of another tenant is not found, like one that does not exist.
"""

from __future__ import annotations

from aiohttp import web

from schemas.api import MessageExplanation
from streams.api import path_params as pp
from streams.api.bodies import reply
from streams.api.context import caller_of, context_of
from streams.api.inputs import path_text
from streams.api.openapi import Route
from streams.errors import NotFoundError
from streams.ingest import messages

__all__ = ["ROUTES", "explain_message"]


async def explain_message(request: web.Request) -> web.Response:
    """Everything about one envelope, by id or dedupe key (``tideway messages show``)."""
    caller, ident = caller_of(request), path_text(request, "id")
    if ident.isdigit() and int(ident) >= 2**63:  # the path's kind: digits; ids are bigint
        raise NotFoundError("no such envelope")
    ctx = context_of(request)
    found = await messages.explain(ctx.settings, ident, tenant=caller.tenant, pool=ctx.pool)
    return reply(MessageExplanation.model_validate(found))


ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/v1/messages/{id}", handler=explain_message, tag="envelopes",
          summary="Explain one envelope (by id, dedupe key or digest)",
          response=MessageExplanation, path_types={"id": pp.MESSAGE},
          not_found="no such envelope"),
)  # fmt: skip
