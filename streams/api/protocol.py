"""Connection-level failures answered with the API's JSON error body instead of plain text.

aiohttp answers a request it cannot parse - a header or request line over ``max_field_size`` /
``max_line_size``, too many headers, a malformed request line - from its connection handler,
before the application and its middlewares ever see the request, with a plain-text body
(aio-libs/aiohttp#3287 asks for a hook; there is none). The same handler writes the answer when
an exception escapes the middlewares. So :class:`ApiRunner` swaps in a connection handler whose
``handle_error`` writes ``{"error": {"code", "message"}}``.

This is a risky choice, named here: it relies on aiohttp internals - ``AppRunner._make_server``,
``Server.__call__`` building a ``RequestHandler`` from ``Server._loop`` / ``Server._kwargs``, and
``RequestHandler.handle_error``. The API tests send such requests over a raw socket, so an
aiohttp upgrade that moves any of these fails a test rather than the API's error contract.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from streams.api.context import error_response, http_code

__all__ = ["ApiRunner"]

_MESSAGES = {
    400: "the request could not be parsed (malformed, or a request line or header too large)",
    500: "an unexpected error occurred",
}


class _JsonErrorHandler(RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # The base class logs the failure and refuses (ConnectionError) when a response has
        # already begun; its plain-text body is what we replace.
        super().handle_error(request, status, exc, message)
        text = _MESSAGES.get(status, "the request failed")
        resp = error_response(status, http_code(status), text)
        resp.force_close()  # as aiohttp does: the connection's state is unknown after this
        return resp


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """An :class:`aiohttp.web.AppRunner` whose connection-level errors are JSON too."""

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return _JsonErrorServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **plain._kwargs,
        )
